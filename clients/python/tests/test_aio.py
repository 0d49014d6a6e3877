"""The asyncio API against a real cluster."""

from __future__ import annotations

import asyncio

import pytest

import picket
from conftest import force_release, wait_until

NS = "orders"


def run(coro):
    return asyncio.run(coro)


def test_async_lock_context_managers_and_rising_tokens(cluster, key):
    async def main():
        client = cluster.aio_client()
        async with client.session() as session:
            async with session.lock(NS, key) as first:
                assert first.token > 0 and first.is_held()
            second = await session.try_lock(NS, key)
            assert second.token > first.token
            await second.release()
            with pytest.raises(picket.ReleasedError):
                await second.release()
        assert not session.is_alive()
        assert (await asyncio.wait_for(session.lost, 5)).kind == "closed"

    run(main())


def test_async_lost_signal_on_force_release(cluster, operators, key):
    async def main():
        client = cluster.aio_client()
        async with client.session() as session:
            lock = await session.lock(NS, key)
            waiter = asyncio.ensure_future(lock.lost)
            await asyncio.sleep(0.05)
            assert not waiter.done()
            await asyncio.get_running_loop().run_in_executor(
                None, force_release, operators, NS, key, lock.token)
            reason = await asyncio.wait_for(waiter, 10)
            assert reason.kind == "force_released" and lock.lost.is_set()
            with pytest.raises(picket.LockLostError):
                await lock.release()

    run(main())


def test_task_cancellation_leaves_no_waiter(cluster, client, key):
    async def main():
        aio = cluster.aio_client()
        async with aio.session() as a, aio.session() as b:
            async with a.lock(NS, key):
                task = asyncio.ensure_future(b.lock(NS, key))
                await asyncio.sleep(0.3)
                assert (await aio.inspect(NS, key))["queue_depth"] == 1
                task.cancel()
                with pytest.raises(asyncio.CancelledError):
                    await task
                for _ in range(100):
                    if (await aio.inspect(NS, key))["queue_depth"] == 0:
                        break
                    await asyncio.sleep(0.05)
                assert (await aio.inspect(NS, key))["queue_depth"] == 0
                with pytest.raises(asyncio.TimeoutError):
                    await asyncio.wait_for(b.lock(NS, key), 0.3)
            for _ in range(100):
                if not (await aio.inspect(NS, key))["holders"]:
                    break
                await asyncio.sleep(0.05)
            assert not (await aio.inspect(NS, key))["holders"], "nothing granted to a cancelled call"

    run(main())


def test_a_thousand_tasks_share_one_client(cluster):
    """1,000 tasks on one client: 50 sessions, each task one lock of 20 keys that 50 sessions
    contend for (a session never asks twice for a key at once)."""
    async def main():
        client = cluster.aio_client()
        gate = picket.FencingGate(100)
        sessions = await asyncio.gather(*(client.session() for _ in range(50)))

        async def one(i):
            key = f"tasks/{i // 50}"
            async with sessions[i % 50].lock(NS, key) as lock:
                gate.check(key, lock.token)
                await asyncio.sleep(0)
                return lock.token

        tokens = await asyncio.gather(*(one(i) for i in range(1000)))
        for session in sessions:
            await session.close()
        assert len(tokens) == 1000 and len(set(tokens)) == 1000

    run(main())


def test_async_watch_and_admin(cluster, key):
    async def main():
        client = cluster.aio_client()
        watch = await client.watch(NS, key).started()
        async with client.session() as session:
            async with session.lock(NS, key) as lock:
                info = await client.inspect(NS, key)
                assert info["holder"]["token"] == lock.token
        async def first():
            async for event in watch:
                if event.get("key") == key:
                    return event
        event = await asyncio.wait_for(first(), 10)
        assert event["revision"] >= lock.token

    run(main())


def test_async_bad_arguments_are_refused_before_anything_is_sent(cluster):
    async def main():
        client = cluster.aio_client()
        async with client.session() as session:
            with pytest.raises(ValueError, match="namespace"):
                session.lock("BAD", "k")
            with pytest.raises(TypeError, match="timeout"):
                session.lock(NS, "k", timeout=[1])

    run(main())
