"""Real `picketd run` processes on free loopback ports for the `picket` package's tests.

Run by scripts/test-python-client, which passes:
  PICKETD            the picketd binary
  PICKET_PY_TMP      a temporary directory (configs, data, logs, certificates)
  PICKET_PY_PIDFILE  where each started process's PID is written (the script kills them on exit)
"""

from __future__ import annotations

import itertools
import os
import socket
import subprocess
import time
from pathlib import Path
from typing import List, Optional

import pytest

import picket

TMP = Path(os.environ["PICKET_PY_TMP"])
DEADLINE_S = 30
_clusters = itertools.count(1)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Cluster:
    """Three picketd processes. `endpoints` are host:port; `tls` is a dict of PEM paths
    (`ca`, `cert`, `key`) and `require_client_cert`, or None."""

    def __init__(self, tls: Optional[dict] = None, session_ttl_ms: int = 10_000):
        self.name = f"c{next(_clusters)}"
        self.dir = TMP / self.name
        self.dir.mkdir(parents=True)
        self.tls = tls
        ports = [(free_port(), free_port()) for _ in range(3)]
        self.endpoints = [f"127.0.0.1:{client}" for client, _ in ports]
        members = "".join(
            f'[[members]]\nid = {i + 1}\npeer_address = "127.0.0.1:{peer}"\n'
            f'client_address = "127.0.0.1:{client}"\n'
            for i, (client, peer) in enumerate(ports)
        )
        tls_section = ""
        auth = "insecure_dev_auth = true\n"
        if tls:
            tls_section = (
                f'[tls]\ncert = "{tls["cert"]}"\nkey = "{tls["key"]}"\nca = "{tls["ca"]}"\n'
                f'require_client_cert = {"true" if tls.get("require_client_cert") else "false"}\n'
                "http = false\n"
            )
            if tls.get("require_client_cert"):
                auth = ""  # the certificate is the credential (role picket-client by default)
        self.configs = []
        for i in range(3):
            config = self.dir / f"node-{i + 1}.toml"
            config.write_text(
                f'cluster_id = "python-{self.name}"\nnode_id = {i + 1}\n'
                f'data_dir = "{self.dir / f"node-{i + 1}"}"\n{auth}{members}'
                "[timing]\nelection_timeout_ms_min = 300\nelection_timeout_ms_max = 600\n"
                "heartbeat_ms = 50\n[storage]\npreallocate_bytes = 0\n"
                f"[sessions]\nttl_ms_default = {session_ttl_ms}\n"
                f"{tls_section}"
            )
            self.configs.append(config)
        self.procs: List[Optional[subprocess.Popen]] = [None, None, None]
        for i in range(3):
            self.start(i, init=True)

    def start(self, i: int, init: bool = False) -> None:
        log = open(self.dir / f"node-{i + 1}.log", "ab")
        args = [os.environ["PICKETD"], "run", "--config", str(self.configs[i])]
        if init:
            args.insert(2, "--init")
        proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=log)
        self.procs[i] = proc
        with open(os.environ["PICKET_PY_PIDFILE"], "a") as pids:
            pids.write(f"{proc.pid}\n")

    def kill9(self, i: int) -> None:
        proc = self.procs[i]
        assert proc is not None
        proc.kill()
        proc.wait()
        self.procs[i] = None

    def index_of(self, uri: str) -> int:
        for i, endpoint in enumerate(self.endpoints):
            if uri.endswith(endpoint):
                return i
        raise AssertionError(f"{uri} is none of {self.endpoints}")

    def stop(self) -> None:
        for proc in self.procs:
            if proc is not None:
                proc.terminate()
        for proc in self.procs:
            if proc is not None:
                try:
                    proc.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait()

    def client(self, **kwargs) -> picket.Client:
        kwargs.setdefault("name", "pytest")
        return picket.Client(self.endpoints, **kwargs)

    def aio_client(self, **kwargs) -> picket.aio.Client:
        kwargs.setdefault("name", "pytest")
        return picket.aio.Client(self.endpoints, **kwargs)

    def wait_ready(self, **client_kwargs) -> None:
        """Until a session can be opened (a leader is elected)."""
        client = self.client(retry_budget=DEADLINE_S, **client_kwargs)
        with client.session():
            pass


@pytest.fixture(scope="session")
def cluster():
    cluster = Cluster()
    try:
        cluster.wait_ready()
        yield cluster
    finally:
        cluster.stop()


@pytest.fixture()
def client(cluster):
    return cluster.client()


@pytest.fixture()
def operators(cluster):
    """Two operators (two-person rule) and a class admin, by the dev metadata."""
    alice = cluster.client(principal="alice", roles="picket-operator,picket-admin")
    bob = cluster.client(principal="bob", roles="picket-operator")
    return alice, bob


_keys = itertools.count(1)


@pytest.fixture()
def key(request):
    """A key no other test uses."""
    return f"{request.node.name}/{next(_keys)}"


def wait_until(predicate, what: str, timeout: float = 10.0, every: float = 0.05):
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"not within {timeout} s: {what}")
        time.sleep(every)


def force_release(operators, namespace: str, key: str, token: int, revoke: bool = False) -> dict:
    """Requests (alice) and approves (bob) a force-release of `token`."""
    alice, bob = operators
    requested = alice.request_force_release(namespace, key, token, "pytest: stuck",
                                            revoke_session=revoke)
    return bob.approve_force_release(requested["force_release_id"],
                                     acknowledged_fenced=requested["fenced"])
