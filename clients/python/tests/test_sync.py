"""Every call of the blocking API against a real cluster."""

from __future__ import annotations

import _thread
import logging
import os
import re
import threading
import time
from pathlib import Path

import pytest

import picket
from conftest import force_release, wait_until

NS = "orders"
DOCS = Path(__file__).resolve().parents[3] / "docs" / "python.md"


def test_the_first_block_of_docs_python_md_runs_and_prints_a_token(cluster, capsys):
    text = DOCS.read_text()
    opening, block = re.search(r"```(\w*)\n(.*?)```", text, re.S).groups()
    assert opening == "python", "the first code block of docs/python.md is the program"
    dev = '["127.0.0.1:7401", "127.0.0.1:7402", "127.0.0.1:7403"]'
    assert dev in block, "the first block talks to `picketd dev`"
    exec(compile(block.replace(dev, repr(cluster.endpoints)), "docs/python.md", "exec"), {})
    out = capsys.readouterr().out
    assert re.search(r"token \d+", out), out


def test_a_lock_carries_a_rising_token_and_is_released_on_exit(client, key):
    with client.session() as session:
        assert session.id > 0 and session.ttl > 0 and session.is_alive()
        assert session.state["state"] == "healthy"
        with session.lock(NS, key) as first:
            assert first.token > 0 and first.is_held() and not first.lost
            assert (first.namespace, first.key, first.session_id) == (NS, key, session.id)
            assert first.slot is None and first.mode == "exclusive"
        assert not first.is_held()
        with session.lock(NS, key) as second:
            assert second.token > first.token
        with pytest.raises(picket.ReleasedError) as raised:
            second.release()
        assert raised.value.rule == "released"
    assert not session.is_alive()
    assert session.lost.wait(5) and session.lost.reason.kind == "closed"


def test_try_lock_names_the_holder(client, key):
    with client.session() as a, client.session() as b:
        with a.lock(NS, key) as held:
            with pytest.raises(picket.HeldError) as raised:
                b.try_lock(NS, key)
            assert raised.value.rule == "held"
            assert raised.value.holder_session_id == a.id
            assert raised.value.token == held.token
        with b.try_lock(NS, key) as lock:
            assert lock.token > held.token


def test_a_wait_with_a_timeout_gives_up_and_leaves_no_waiter(client, key):
    with client.session() as a, client.session() as b:
        with a.lock(NS, key):
            started = time.monotonic()
            with pytest.raises(picket.WaitTimeoutError) as raised:
                b.lock(NS, key, timeout=0.3)
            assert time.monotonic() - started >= 0.3
            assert raised.value.rule == "wait_timed_out" and isinstance(raised.value, TimeoutError)
            info = client.inspect(NS, key)
            assert info["queue_depth"] == 0 and info["waiters"] == []


def test_a_waiter_gets_the_key_when_the_holder_releases(client, key):
    with client.session() as a, client.session() as b:
        held = a.lock(NS, key)
        got = []
        waiter = threading.Thread(target=lambda: got.append(b.lock(NS, key)))
        waiter.start()
        wait_until(lambda: client.inspect(NS, key)["queue_depth"] == 1, "b queued")
        held.release()
        waiter.join(10)
        assert got and got[0].token > held.token and got[0].session_id == b.id
        got[0].release()


def test_shared_locks_are_held_together_never_with_an_exclusive_one(client, key):
    with client.session() as a, client.session() as b, client.session() as c:
        with a.lock(NS, key, shared=True) as r1, b.try_lock(NS, key, shared=True) as r2:
            assert r1.mode == r2.mode == "shared"
            info = client.inspect(NS, key)
            assert len(info["holders"]) == 2 and info["mode"] == "LOCK_MODE_SHARED"
            with pytest.raises(picket.HeldError):
                c.try_lock(NS, key)
        with pytest.raises(picket.RefusedError) as raised:
            with a.lock(NS, key, shared=True):
                a.try_lock(NS, key)  # the other mode on a key the session holds
        assert raised.value.rule == "mode_change_not_supported"
        assert raised.value.code == "FAILED_PRECONDITION"


def test_semaphore_permits_have_slots(cluster, operators, key):
    alice, _ = operators
    answer = alice.set_semaphore(NS, key, 2, "pytest: two workers")
    assert answer["previous_permits"] == 0
    client = cluster.client()
    with client.session() as a, client.session() as b, client.session() as c:
        with a.acquire_permit(NS, key) as p1, b.try_acquire_permit(NS, key) as p2:
            assert {p1.slot, p2.slot} == {0, 1} and p1.mode == "permit"
            with pytest.raises(picket.HeldError):
                c.try_acquire_permit(NS, key)
            with pytest.raises(picket.WaitTimeoutError):
                c.acquire_permit(NS, key, timeout=0.2)
            assert client.inspect(NS, key)["permits"] == 2
        with pytest.raises(picket.RefusedError) as raised:
            a.try_lock(NS, key)
        assert raised.value.rule == "key_is_semaphore"


def test_a_force_release_fires_the_lost_signal_event_and_callback(cluster, operators, key, caplog):
    client = cluster.client()
    with client.session() as session:
        lock = session.lock(NS, key)
        called = threading.Event()
        reasons = []
        lock.lost.add_callback(lambda reason: (reasons.append(reason), called.set()))
        assert not lock.lost.wait(0.05)
        with caplog.at_level(logging.WARNING, logger="picket"):
            approved = force_release(operators, NS, key, lock.token)
            assert approved["released_token"] == lock.token
            assert lock.lost.wait(10), "the lost signal fired"
            assert called.wait(5)
        assert lock.lost.reason.kind == "force_released"
        assert lock.lost.reason.revision == approved["floor"]
        assert reasons == [lock.lost.reason]
        assert not lock.is_held() and session.is_alive()
        assert any("lost" in r.getMessage() for r in caplog.records if r.name == "picket")
        with pytest.raises(picket.LockLostError) as raised:
            lock.release()
        assert raised.value.rule == "lock_lost" and raised.value.reason.kind == "force_released"
        # a callback added after the fact runs at once
        late = []
        lock.lost.add_callback(late.append)
        assert late == [lock.lost.reason]
        with session.lock(NS, key) as again:
            assert again.token > approved["floor"]


def test_a_revoked_session_loses_every_lock(cluster, operators, key):
    client = cluster.client()
    session = client.session()
    lock = session.lock(NS, key)
    force_release(operators, NS, key, lock.token, revoke=True)
    assert session.lost.wait(10) and lock.lost.wait(10)
    assert session.lost.reason.kind in ("ended", "revoked")
    with pytest.raises(picket.SessionLostError) as raised:
        session.lock(NS, key + "/other")
    assert raised.value.rule == "session_lost"


def _interrupt_main_until(stop: threading.Event) -> threading.Thread:
    """Interrupts the main thread after 0.5 s, and again every 0.2 s until `stop` is set.

    One interrupt is not enough: Python runs the handler of a pending signal at the next
    bytecode of the main thread, which may be inside a weakref callback or a `__del__` (the
    WeakSet of a client's sessions), where the KeyboardInterrupt is printed and dropped; the
    blocking call then never sees it (a CI run hung here under load)."""

    def run() -> None:
        if stop.wait(0.5):
            return
        while not stop.is_set():
            _thread.interrupt_main()
            stop.wait(0.2)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread


def _stop_interrupting(stop: threading.Event, thread: threading.Thread) -> None:
    """Stops the interrupter and absorbs an interrupt it sent before it saw `stop`."""
    while True:
        try:
            stop.set()
            thread.join()
            time.sleep(0.3)
            return
        except KeyboardInterrupt:
            continue


def test_keyboard_interrupt_ends_a_blocking_lock_and_leaves_no_waiter(client, key):
    with client.session() as a, client.session() as b:
        with a.lock(NS, key):
            stop = threading.Event()
            interrupter = _interrupt_main_until(stop)
            started = time.monotonic()
            with pytest.raises(KeyboardInterrupt):
                b.lock(NS, key)
            ended = time.monotonic() - started
            _stop_interrupting(stop, interrupter)
            assert ended < 5
            wait_until(lambda: client.inspect(NS, key)["queue_depth"] == 0, "the wait removed")
        # the key is free once a releases: nothing was granted to b behind our back
        wait_until(lambda: not client.inspect(NS, key)["holders"], "the key free")
        with b.try_lock(NS, key):
            pass


def test_cancel_wait_leaves_the_queue(client, key):
    with client.session() as a, client.session() as b:
        with a.lock(NS, key):
            answer = b.cancel_wait(NS, key)
            assert answer["removed"] is False and answer["held_token"] is None


def test_32_threads_share_one_client_and_the_gate_never_refuses(client):
    gate = picket.FencingGate(1000)
    errors = []
    keys = [f"threads/{i}" for i in range(4)]

    def work(n):
        try:
            with client.session() as session:
                for i in range(10):
                    k = keys[(n + i) % len(keys)]
                    with session.lock(NS, k) as lock:
                        gate.check(f"{NS}/{k}", lock.token)
        except Exception as error:  # noqa: BLE001
            errors.append(error)

    threads = [threading.Thread(target=work, args=(n,)) for n in range(32)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert not errors, errors[:3]
    assert all(gate.highest(f"{NS}/{k}") for k in keys)


def test_the_gil_is_released_while_waiting(client, key):
    with client.session() as a, client.session() as b:
        with a.lock(NS, key):
            ticks = []
            stop = threading.Event()

            def tick():
                while not stop.is_set():
                    ticks.append(1)
                    time.sleep(0.001)

            ticker = threading.Thread(target=tick)
            ticker.start()
            with pytest.raises(picket.WaitTimeoutError):
                b.lock(NS, key, timeout=0.5)
            stop.set()
            ticker.join()
            assert len(ticks) > 50, "another thread ran while lock() waited"


def test_admin_calls(cluster, operators, key):
    alice, bob = operators
    client = cluster.client()
    with client.session() as session, session.lock(NS, key) as lock:
        info = client.inspect(NS, key)
        assert info["holder"]["session_id"] == session.id and info["holder"]["token"] == lock.token
        assert any(h["token"] == lock.token for h in client.holds(NS)["holds"])
        assert client.longest_holds()["holds"]
        requested = alice.request_force_release(NS, key, lock.token, "pytest: deny me")
        pending = [r["id"] for r in bob.force_releases()["requests"]]
        assert requested["force_release_id"] in pending
        with pytest.raises(picket.RefusedError) as raised:
            alice.approve_force_release(requested["force_release_id"],
                                        acknowledged_fenced=requested["fenced"])
        assert raised.value.rule == "approver_is_requester"
        assert raised.value.code == "PERMISSION_DENIED"
        bob.deny_force_release(requested["force_release_id"], "pytest: not stuck")
        assert lock.is_held()
    prefix = key + "/"
    replaced = alice.put_class(NS, {"name": "pytest-class", "prefix": prefix, "fenced": True,
                                   "session_ttl_ms_default": 10_000,
                                   "session_ttl_ms_max": 60_000})
    assert replaced == {"replaced": False}
    assert any(c["prefix"] == prefix for c in client.classes(NS)["classes"])
    alice.remove_class(NS, prefix)
    assert not any(c["prefix"] == prefix for c in client.classes(NS)["classes"])
    records = client.audit(namespace=NS, key=key)["records"]
    assert any("DENIED" in r["action"] for r in records), [r["action"] for r in records]
    with pytest.raises(picket.RefusedError) as raised:
        bob.approve_force_release(10**12, acknowledged_fenced=False)
    assert raised.value.rule == "unknown_force_release"
    status = client.replica_status()
    assert status["node_id"] in (1, 2, 3)


def test_watch_is_an_iterator_of_events(client, key):
    watch = client.watch(NS, key)
    with client.session() as session:
        with session.lock(NS, key) as lock:
            pass
    events = []
    deadline = time.monotonic() + 10
    while len(events) < 2 and time.monotonic() < deadline:
        events.extend(e for e in watch.next_page() if e.get("key") == key)
    assert len(events) >= 2, events
    assert events[0]["revision"] <= lock.token <= events[-1]["revision"]
    assert watch.resume_from > lock.token
    history = client.watch(NS, key, from_revision=0)
    first = next(iter(history))
    assert first["key"] == key


def test_bad_arguments_are_refused_in_python_naming_the_argument(client, cluster):
    with client.session() as session:
        cases = [
            (lambda: session.lock("Orders", "k"), ValueError, "namespace"),
            (lambda: session.lock(1, "k"), TypeError, "namespace"),
            (lambda: session.lock(NS, ""), ValueError, "key"),
            (lambda: session.lock(NS, "x" * 513), ValueError, "key"),
            (lambda: session.lock(NS, b"k"), TypeError, "key"),
            (lambda: session.lock(NS, "k", timeout=0), ValueError, "timeout"),
            (lambda: session.lock(NS, "k", timeout="1"), TypeError, "timeout"),
            (lambda: session.lock(NS, "k", timeout=float("nan")), ValueError, "timeout"),
            (lambda: session.lock(NS, "k", shared=1), TypeError, "shared"),
            (lambda: session.try_acquire_permit(NS, None), TypeError, "key"),
            (lambda: client.inspect(NS, "k", allow_stale="yes"), TypeError, "allow_stale"),
            (lambda: client.request_force_release(NS, "k", 0, "r"), ValueError, "expected_token"),
            (lambda: client.request_force_release(NS, "k", 1, ""), ValueError, "reason"),
            (lambda: client.approve_force_release(True), TypeError, "force_release_id"),
            (lambda: client.set_semaphore(NS, "k", 1025, "r"), ValueError, "permits"),
            (lambda: client.put_class(NS, {"nam": "x"}), ValueError, "spec"),
            (lambda: client.watch(NS, 5), TypeError, "key_prefix"),
            (lambda: picket.Client([]), ValueError, "endpoints"),
            (lambda: picket.Client(7401), TypeError, "endpoints"),
            (lambda: picket.Client(cluster.endpoints, rpc_timeout=-1), ValueError, "rpc_timeout"),
            (lambda: picket.Client(cluster.endpoints, transport="udp"), ValueError, "transport"),
            (lambda: picket.FencingGate(0), ValueError, "capacity"),
            (lambda: picket.FencingGate().check("k", -1), ValueError, "token"),
            (lambda: session.lost.add_callback(3), TypeError, "callback"),
        ]
        for call, kind, name in cases:
            with pytest.raises(kind) as raised:
                call()
            assert name in str(raised.value), (name, raised.value)
        assert session.is_alive()
    with pytest.raises(picket.ConfigError) as raised:
        picket.Client(["http://[::1"], name="x")
    assert raised.value.rule == "bad_endpoint" and isinstance(raised.value, ValueError)


def test_an_unreachable_cluster_is_unavailable_within_the_budget():
    client = picket.Client(["127.0.0.1:9"], retry_budget=0.5, connect_timeout=0.2)
    started = time.monotonic()
    with pytest.raises(picket.UnavailableError) as raised:
        client.session()
    assert raised.value.rule == "unavailable" and raised.value.attempts >= 1
    assert time.monotonic() - started < 10


def test_after_fork_the_child_makes_its_own_client(cluster, client, key):
    with client.session() as session:
        read, write = os.pipe()
        pid = os.fork()
        if pid == 0:  # the child: never return into pytest
            code = 1
            try:
                try:
                    session.lock(NS, key)
                except picket.UsedAfterForkError as error:
                    assert error.rule == "used_after_fork"
                    with cluster.client().session() as own, own.lock(NS, key) as lock:
                        os.write(write, str(lock.token).encode())
                    code = 0
            finally:
                os._exit(code)
        os.close(write)
        _, status = os.waitpid(pid, 0)
        token = os.read(read, 64).decode()
        os.close(read)
        assert os.waitstatus_to_exitcode(status) == 0 and int(token) > 0
        with session.lock(NS, key) as lock:  # the parent's session still works
            assert lock.token > int(token)
