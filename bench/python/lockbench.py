"""The lock workload of picket-bench (bench/src/workload.rs, `--workload lock`) from Python,
through the `picket` package: C clients, each with its own client and session, cycle
lock ; release on one of K keys (uniformly at random, the key fixed for K = 1) for a warm-up,
then a counted window. Prints the line picket-bench prints:

    <system> <label> <ops/s> <p50 ms> <p99 ms>

  python lockbench.py --endpoints 127.0.0.1:7401,... --clients 1 --keys 1 --label lock-1key-c1
  --api sync: one thread per client (picket.Client); --api asyncio: one task per client
  (picket.aio.Client), all on one event loop.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import sys
import threading
import time

from benchstats import percentile_ms  # beside this file

import picket
import picket.aio


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--endpoints", default="127.0.0.1:7401,127.0.0.1:7402,127.0.0.1:7403")
    parser.add_argument("--clients", type=int, default=1)
    parser.add_argument("--keys", type=int, default=1)
    parser.add_argument("--duration-s", type=float, default=10.0)
    parser.add_argument("--warmup-s", type=float, default=2.0)
    parser.add_argument("--namespace", default="bench")
    parser.add_argument("--prefix", default=f"/python/{os.getpid()}")
    parser.add_argument("--label", default="")
    parser.add_argument("--api", choices=["sync", "asyncio"], default="sync")
    parser.add_argument("--system", default="")
    args = parser.parse_args()
    if args.clients < 1 or args.keys < 1 or args.duration_s <= 0:
        parser.error("--clients, --keys and --duration-s must be above zero")
    endpoints = args.endpoints.split(",")
    keys = [f"{args.prefix}/lock/{k}" for k in range(args.keys)]
    start = stop = 0.0
    samples = []  # (end, latency) per op, all clients
    errors = []

    if args.api == "sync":
        ready = threading.Barrier(args.clients + 1)
        go = threading.Event()
        window = {}

        def client_loop(i):
            rng = random.Random(i)
            client = picket.Client(endpoints, name="lockbench", session_ttl=60)
            own = []
            with client.session() as session:
                ready.wait()
                go.wait()
                end_at = window["stop"]
                while True:
                    now = time.monotonic()
                    if now >= end_at:
                        break
                    key = keys[0] if args.keys == 1 else keys[rng.randrange(args.keys)]
                    try:
                        lock = session.lock(args.namespace, key)
                        lock.release()
                    except picket.PicketError as error:
                        errors.append(error)
                        time.sleep(0.01)
                        continue
                    end = time.monotonic()
                    own.append((end, end - now))
            samples.extend(own)

        threads = [threading.Thread(target=client_loop, args=(i,)) for i in range(args.clients)]
        for t in threads:
            t.start()
        ready.wait()  # every client has its session
        t0 = time.monotonic()
        start, stop = t0 + args.warmup_s, t0 + args.warmup_s + args.duration_s
        window["stop"] = stop
        go.set()
        for t in threads:
            t.join()
    else:
        async def run():
            nonlocal start, stop
            clients = [picket.aio.Client(endpoints, name="lockbench", session_ttl=60)
                       for _ in range(args.clients)]
            sessions = await asyncio.gather(*(c.session() for c in clients))
            t0 = time.monotonic()
            start, stop = t0 + args.warmup_s, t0 + args.warmup_s + args.duration_s

            async def client_loop(i, session):
                rng = random.Random(i)
                while True:
                    now = time.monotonic()
                    if now >= stop:
                        break
                    key = keys[0] if args.keys == 1 else keys[rng.randrange(args.keys)]
                    try:
                        lock = await session.lock(args.namespace, key)
                        await lock.release()
                    except picket.PicketError as error:
                        errors.append(error)
                        await asyncio.sleep(0.01)
                        continue
                    end = time.monotonic()
                    samples.append((end, end - now))

            await asyncio.gather(*(client_loop(i, s) for i, s in enumerate(sessions)))
            for session in sessions:
                await session.close()

        asyncio.run(run())

    counted = [latency for end, latency in samples if start <= end < stop]
    system = args.system or f"python-{args.api}"
    print(f"{system} {args.label} {len(counted) / args.duration_s:.1f} "
          f"{percentile_ms(counted, 50):.3f} {percentile_ms(counted, 99):.3f}")
    print(f"# {system} {args.label}: clients={args.clients} keys={args.keys} counted={len(counted)} "
          f"errors={len(errors)} first_error={errors[0] if errors else None}", file=sys.stderr)


if __name__ == "__main__":
    main()
