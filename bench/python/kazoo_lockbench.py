"""The lock workload of lockbench.py (and picket-bench's `--workload lock`) on ZooKeeper, through
kazoo's `Lock` recipe (PyPI `kazoo`): C clients, each its own KazooClient (its own ZooKeeper
session) on its own thread, cycle acquire ; release on one of K lock paths (uniformly at random,
the path fixed for K = 1) for a warm-up, then a counted window. Prints the line lockbench.py
prints:

    <system> <label> <ops/s> <p50 ms> <p99 ms>

  python kazoo_lockbench.py --hosts 127.0.0.1:27521 --clients 1 --keys 1 --label lock-1key-c1

One acquire + release of kazoo's recipe is: create an ephemeral sequential node under the lock
path, list the path's children, and, when another contender is ahead, watch its predecessor and
wait for its deletion; then delete the node. That is two writes (proposals) per cycle, as in the
Curator recipe of ../shared/bench/run_zk_anchor.sh. Each client keeps one `Lock` object per lock
path and reuses it (as a service taking the same lock again would); the lock paths are created
before the clients start, so the recipe's one-time `ensure_path` (an `exists` per Lock object) is
marked done up front and not counted in the window.
"""

from __future__ import annotations

import argparse
import os
import random
import sys
import threading
import time

from benchstats import percentile_ms  # beside this file

from kazoo.client import KazooClient
from kazoo.exceptions import KazooException, NodeExistsError


def create_lock_paths(hosts, paths, timeout_s):
    """Create every lock path (persistent, empty) so no client creates one inside the window."""
    client = KazooClient(hosts=hosts, timeout=timeout_s)
    client.start(timeout=timeout_s)
    try:
        client.ensure_path(os.path.dirname(paths[0]))
        pending = [client.create_async(path) for path in paths]
        for result in pending:
            try:
                result.get(timeout=timeout_s)
            except NodeExistsError:
                pass
    finally:
        client.stop()
        client.close()


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--hosts", default="127.0.0.1:2181",
                        help="ZooKeeper servers, host:port,... (scripts/bench-python passes the leader)")
    parser.add_argument("--clients", type=int, default=1)
    parser.add_argument("--keys", type=int, default=1)
    parser.add_argument("--duration-s", type=float, default=10.0)
    parser.add_argument("--warmup-s", type=float, default=2.0)
    parser.add_argument("--session-timeout-s", type=float, default=30.0)
    parser.add_argument("--prefix", default=f"/kazoo/{os.getpid()}")
    parser.add_argument("--label", default="")
    parser.add_argument("--system", default="kazoo")
    args = parser.parse_args()
    if args.clients < 1 or args.keys < 1 or args.duration_s <= 0:
        parser.error("--clients, --keys and --duration-s must be above zero")
    if not args.prefix.startswith("/"):
        parser.error("--prefix must be an absolute ZooKeeper path (start with /)")
    keys = [f"{args.prefix}/lock/{k}" for k in range(args.keys)]
    create_lock_paths(args.hosts, keys, args.session_timeout_s)

    samples = []  # (end, latency) per op, all clients
    errors = []
    ready = threading.Barrier(args.clients + 1)
    go = threading.Event()
    window = {}

    def client_loop(i):
        rng = random.Random(i)
        client = KazooClient(hosts=args.hosts, timeout=args.session_timeout_s)
        try:
            client.start(timeout=args.session_timeout_s)
        except Exception:
            ready.abort()  # the others and main stop waiting (BrokenBarrierError) instead of hanging
            raise
        locks = {}  # lock path -> this client's Lock for it, made on first use
        own = []
        try:
            ready.wait()
            go.wait()
            end_at = window["stop"]
            while True:
                now = time.monotonic()
                if now >= end_at:
                    break
                key = keys[0] if args.keys == 1 else keys[rng.randrange(args.keys)]
                lock = locks.get(key)
                if lock is None:
                    lock = client.Lock(key, identifier=f"lockbench-{i}")
                    lock.assured_path = True  # the path exists (create_lock_paths)
                    locks[key] = lock
                try:
                    lock.acquire()
                    lock.release()
                except KazooException as error:
                    errors.append(error)
                    time.sleep(0.01)
                    continue
                end = time.monotonic()
                own.append((end, end - now))
        finally:
            samples.extend(own)
            client.stop()
            client.close()

    threads = [threading.Thread(target=client_loop, args=(i,)) for i in range(args.clients)]
    for t in threads:
        t.start()
    ready.wait()  # every client has its session
    t0 = time.monotonic()
    start, stop = t0 + args.warmup_s, t0 + args.warmup_s + args.duration_s
    window["stop"] = stop
    go.set()
    # This process's CPU over the counted window: kazoo is pure Python, one GIL for every
    # client's caller, connection and callback threads, so this is what bounds it with many clients.
    time.sleep(max(0.0, start - time.monotonic()))
    cpu_start = os.times()
    time.sleep(max(0.0, stop - time.monotonic()))
    cpu_stop = os.times()
    for t in threads:
        t.join()
    cpu_s = (cpu_stop.user + cpu_stop.system) - (cpu_start.user + cpu_start.system)

    counted = [latency for end, latency in samples if start <= end < stop]
    print(f"{args.system} {args.label} {len(counted) / args.duration_s:.1f} "
          f"{percentile_ms(counted, 50):.3f} {percentile_ms(counted, 99):.3f}")
    print(f"# {args.system} {args.label}: clients={args.clients} keys={args.keys} counted={len(counted)} "
          f"errors={len(errors)} first_error={errors[0] if errors else None} "
          f"client_cpu_s={cpu_s:.2f} ({cpu_s / args.duration_s:.2f} cores, "
          f"{cpu_s * 1e6 / max(1, len(counted)):.0f} us per op) "
          f"max_ms={max(counted, default=0.0) * 1000.0:.1f} slow_ops_1s={sum(1 for x in counted if x >= 1.0)}",
          file=sys.stderr)


if __name__ == "__main__":
    main()
