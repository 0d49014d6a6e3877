"""A client written from the protos in another language decodes every Picket error with that
language's standard status library: Python's `grpc_status.rpc_status.from_call` (which checks
that the google.rpc.Status in `grpc-status-details-bin` has the call's own code and message).

Three `picketd run` processes on free loopback ports with a temporary data directory; stubs
generated from proto/ (the schema, proto/picket/v1/) by grpcio-tools at test time. Run by scripts/test-python, which passes:
  PICKETD            the picketd binary
  PICKET_PROTO_DIR   proto
  PICKET_PY_TMP      a temporary directory (configs, data, logs, stubs)
  PICKET_PY_PIDFILE  where each started process's PID is written (the script kills them on exit)
"""

import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import grpc
import pytest
from google.rpc import error_details_pb2
from grpc_status import rpc_status
from grpc_tools import protoc

TMP = Path(os.environ["PICKET_PY_TMP"])
STUBS = TMP / "stubs"


def generate_stubs():
    proto_dir = Path(os.environ["PICKET_PROTO_DIR"])
    STUBS.mkdir(parents=True, exist_ok=True)
    files = sorted(str(p) for p in (proto_dir / "picket" / "v1").glob("*.proto"))
    # The well-known types (google/protobuf/any.proto, imported by proto/'s
    # google/rpc/status.proto) ship with grpcio-tools; google.rpc's Python module comes from
    # googleapis-common-protos, so only picket/v1 is generated.
    well_known = Path(protoc.__file__).parent / "_proto"
    args = [
        "protoc",
        f"-I{proto_dir}",
        f"-I{well_known}",
        f"--python_out={STUBS}",
        f"--grpc_python_out={STUBS}",
    ]
    assert protoc.main(args + files) == 0, "grpcio-tools could not compile proto/"
    sys.path.insert(0, str(STUBS))


generate_stubs()
from picket.v1 import common_pb2, lock_pb2, lock_pb2_grpc  # noqa: E402

NS = "orders"
DEADLINE_S = 20


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Cluster:
    """Three picketd processes; `addresses` are host:port gRPC targets."""

    def __init__(self):
        self.procs = []
        ports = [(free_port(), free_port()) for _ in range(3)]
        self.addresses = [f"127.0.0.1:{client}" for client, _ in ports]
        members = "".join(
            f'[[members]]\nid = {i + 1}\npeer_address = "127.0.0.1:{peer}"\n'
            f'client_address = "127.0.0.1:{client}"\n'
            for i, (client, peer) in enumerate(ports)
        )
        for i in range(3):
            config = TMP / f"node-{i + 1}.toml"
            config.write_text(
                f'cluster_id = "python"\nnode_id = {i + 1}\n'
                f'data_dir = "{TMP / f"node-{i + 1}"}"\ninsecure_dev_auth = true\n{members}'
                "[timing]\nelection_timeout_ms_min = 300\nelection_timeout_ms_max = 600\n"
                "heartbeat_ms = 50\n[storage]\npreallocate_bytes = 0\n"
                # One watch stream per replica, so that a second is refused as busy.
                "[limits]\nwatch_streams_max = 1\n"
            )
            log = open(TMP / f"node-{i + 1}.log", "ab")
            proc = subprocess.Popen(
                [os.environ["PICKETD"], "run", "--init", "--config", str(config)],
                stdout=subprocess.DEVNULL,
                stderr=log,
            )
            self.procs.append(proc)
            with open(os.environ["PICKET_PY_PIDFILE"], "a") as pids:
                pids.write(f"{proc.pid}\n")

    def stop(self):
        for proc in self.procs:
            proc.terminate()
        for proc in self.procs:
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


def stub(address):
    return lock_pb2_grpc.LockStub(grpc.insecure_channel(address))


def create_session_request(name="python", **fields):
    return lock_pb2.CreateSessionRequest(
        ttl_ms=10_000, identity=lock_pb2.ClientIdentity(name=name, host="test", pid=os.getpid()), **fields
    )


def refusal(call):
    """Runs `call`, which must fail, and decodes its error with the standard library: the
    grpc.RpcError, the google.rpc.Status, the Picket ErrorDetail and the standard ErrorInfo."""
    try:
        result = call()
        if hasattr(result, "__iter__") and not isinstance(result, (bytes, str)):
            list(result)  # a stream: its error arrives while reading
    except grpc.RpcError as error:
        status = rpc_status.from_call(error)
        assert status is not None, f"no grpc-status-details-bin: {error}"
        assert status.code == error.code().value[0]
        detail, info = common_pb2.ErrorDetail(), error_details_pb2.ErrorInfo()
        found = {a.type_url for a in status.details}
        assert any(a.Is(detail.DESCRIPTOR) and a.Unpack(detail) for a in status.details), found
        assert any(a.Is(info.DESCRIPTOR) and a.Unpack(info) for a in status.details), found
        assert info.reason == detail.rule, (info, detail)
        assert info.domain == "picket.v1"
        assert detail.message == error.details()
        return error, status, detail, info
    raise AssertionError("the call succeeded; a refusal was expected")


@pytest.fixture(scope="module")
def cluster():
    cluster = Cluster()
    try:
        yield cluster
    finally:
        cluster.stop()


@pytest.fixture(scope="module")
def leader(cluster):
    """The index of the leader: the replica that opens a session and that both other replicas
    name in their not-leader refusals (so that a first election's duel is over)."""
    deadline = time.monotonic() + DEADLINE_S
    last = None
    while True:
        for i, address in enumerate(cluster.addresses):
            try:
                stub(address).CreateSession(create_session_request(), timeout=2)
            except grpc.RpcError as error:
                last = error
                continue
            if all(named_leader(cluster.addresses[j]) == address for j in range(3) if j != i):
                return i
        if time.monotonic() > deadline:
            raise AssertionError(f"no leader that all replicas agree on within {DEADLINE_S} s: {last}")
        time.sleep(0.2)


def named_leader(address):
    """The leader address a replica's not-leader refusal names, or None."""
    try:
        stub(address).CreateSession(create_session_request(), timeout=2)
    except grpc.RpcError as error:
        status = rpc_status.from_call(error)
        for any_detail in status.details if status else []:
            detail = common_pb2.ErrorDetail()
            if any_detail.Is(detail.DESCRIPTOR) and any_detail.Unpack(detail) and detail.rule == "not_leader":
                return detail.leader_address or None
    return None


@pytest.fixture(scope="module")
def session(cluster, leader):
    """A session opened without a secret: the replica draws one and returns it once."""
    created = stub(cluster.addresses[leader]).CreateSession(create_session_request(), timeout=5)
    assert len(created.session_secret) >= 16
    return created


def test_not_leader_hint_is_a_grpcio_target_to_follow(cluster, leader):
    follower = cluster.addresses[(leader + 1) % 3]
    deadline = time.monotonic() + DEADLINE_S
    while True:
        error, status, detail, info = refusal(
            lambda: stub(follower).CreateSession(create_session_request(), timeout=5)
        )
        assert error.code() == grpc.StatusCode.UNAVAILABLE
        assert detail.rule == "not_leader" and detail.retryable
        if detail.leader_address:
            break
        assert time.monotonic() < deadline, "the follower never learned the leader"
        time.sleep(0.1)
    assert detail.leader_address == cluster.addresses[leader]
    assert detail.leader_endpoint == f"http://{cluster.addresses[leader]}"
    assert info.metadata["leader_address"] == detail.leader_address
    assert info.metadata["leader_node_id"] == str(leader + 1)
    trailers = dict(error.trailing_metadata())
    assert trailers["picket-leader-address"] == detail.leader_address
    assert trailers["picket-leader"] == detail.leader_endpoint
    # grpcio refuses `http://` targets; the scheme-less address works as it is.
    answer = stub(info.metadata["leader_address"]).CreateSession(create_session_request(), timeout=5)
    assert answer.session_id > 0


def test_not_leader_on_a_stream_arrives_in_the_trailers(cluster, leader, session):
    follower = cluster.addresses[(leader + 1) % 3]
    requests = iter(
        [lock_pb2.KeepAliveRequest(session_id=session.session_id, seq=1, session_secret=session.session_secret)]
    )
    error, _, detail, _ = refusal(lambda: stub(follower).KeepAlive(requests, timeout=5))
    assert error.code() == grpc.StatusCode.UNAVAILABLE
    assert detail.rule == "not_leader"


def test_bad_namespace_names_rule_and_field(cluster, leader, session):
    request = lock_pb2.AcquireRequest(
        session_id=session.session_id,
        request_id=1,
        namespace="Orders",
        key="k",
        session_secret=session.session_secret,
    )
    error, _, detail, info = refusal(lambda: stub(cluster.addresses[leader]).Acquire(request, timeout=5))
    assert error.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert detail.rule == "invalid_argument"
    assert detail.field == "acquire.namespace"
    assert info.metadata["field"] == "acquire.namespace"


def test_unknown_session(cluster, leader):
    request = lock_pb2.CloseSessionRequest(session_id=999_999_999, session_secret=b"s" * 32)
    error, _, detail, info = refusal(lambda: stub(cluster.addresses[leader]).CloseSession(request, timeout=5))
    assert error.code() == grpc.StatusCode.NOT_FOUND
    assert detail.rule == "unknown_session"
    assert info.reason == "unknown_session"


def test_a_wrong_session_secret_is_session_not_yours(cluster, leader, session):
    request = lock_pb2.AcquireRequest(
        session_id=session.session_id, request_id=7, namespace=NS, key="k", session_secret=b"x" * 32
    )
    error, _, detail, info = refusal(lambda: stub(cluster.addresses[leader]).Acquire(request, timeout=5))
    assert error.code() == grpc.StatusCode.PERMISSION_DENIED
    assert detail.rule == "session_not_yours" and info.reason == "session_not_yours"
    assert session.session_secret.hex() not in detail.message


def test_busy_when_a_bound_is_hit(cluster, leader):
    lock = stub(cluster.addresses[leader])
    watch = lock_pb2.WatchRequest(namespace=NS, from_revision=0)
    first = lock.Watch(watch, timeout=30)
    try:
        first.initial_metadata()  # the stream is open: it holds the only watch slot
        error, _, detail, info = refusal(lambda: lock.Watch(watch, timeout=5))
        assert error.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
        assert detail.rule == "busy" and detail.retryable
        assert info.metadata["retryable"] == "true"
    finally:
        first.cancel()


def test_oversize_message(cluster, leader):
    request = create_session_request(name="n" * (4 * 1024 * 1024 + 1))
    error, _, detail, _ = refusal(lambda: stub(cluster.addresses[leader]).CreateSession(request, timeout=10))
    assert error.code() == grpc.StatusCode.OUT_OF_RANGE
    assert detail.rule == "message_too_large"


def test_malformed_protobuf_and_unknown_method(cluster, leader):
    channel = grpc.insecure_channel(cluster.addresses[leader])
    # Field 2 of CreateSessionRequest (identity, a message) sent as a varint.
    create = channel.unary_unary("/picket.v1.Lock/CreateSession")
    error, _, detail, _ = refusal(lambda: create(b"\x10\x01", timeout=5))
    assert error.code() == grpc.StatusCode.INTERNAL
    assert detail.rule == "malformed_request"
    for method in ["/picket.v1.Lock/Steal", "/picket.v9.Nothing/Here"]:
        call = channel.unary_unary(method)
        error, _, detail, _ = refusal(lambda: call(b"", timeout=5))
        assert error.code() == grpc.StatusCode.UNIMPLEMENTED
        assert detail.rule == "unknown_method"
        assert method in detail.message
