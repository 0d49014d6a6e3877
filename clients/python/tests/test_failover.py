"""kill -9 of the leader while sessions hold locks: the sessions survive (the client library
follows the new leader and keeps them alive) and tokens keep rising."""

from __future__ import annotations

import time

import picket
from conftest import Cluster

NS = "orders"


def test_sessions_survive_a_kill_9_of_the_leader_and_tokens_keep_rising():
    cluster = Cluster(session_ttl_ms=10_000)
    try:
        cluster.wait_ready()
        client = cluster.client(retry_budget=20)
        sessions = [client.session() for _ in range(3)]
        locks = [s.lock(NS, f"failover/{i}") for i, s in enumerate(sessions)]
        top = max(lock.token for lock in locks)
        leader = cluster.index_of(client.leader)
        cluster.kill9(leader)
        # The next lock goes to the new leader (retries keep their request ids).
        with sessions[0].lock(NS, "failover/after") as after:
            assert after.token > top
        assert cluster.index_of(client.leader) != leader
        # Longer than a keepalive period on the old leader would have allowed.
        time.sleep(4)
        for session, lock in zip(sessions, locks):
            assert session.is_alive() and lock.is_held() and not lock.lost, lock
        for lock in locks:
            lock.release()
        again = sessions[1].lock(NS, "failover/1")
        assert again.token > after.token
        again.release()
        cluster.start(leader)  # it rejoins and catches up
        for session in sessions:
            session.close()
    finally:
        cluster.stop()
