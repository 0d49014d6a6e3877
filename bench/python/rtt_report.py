"""scripts/bench-rtt's tables: messages per lock operation from the capture counts, the
sequential round trips on the critical path, and the LAN projection (docs/PERFORMANCE.md,
"Round trips per operation").

usage: rtt_report.py COUNTS PROBES LAN_RTT_MS [FSYNC_MS]

FSYNC_MS: project with this fdatasync too (given, not probed), as a second table.

COUNTS lines: system shape clients ops_per_client wall_s capture_s to_server to_client peer other
(shape "idle": no client, the heartbeats). PROBES lines: probe <label> <per_s> <p50_ms> <p99_ms>.
"""

import sys

# Sequential network round trips and fdatasyncs on the critical path, from each protocol
# (docs/PERFORMANCE.md, "Round trips per operation", says why); the counts printed beside them
# are the check. "c1": one acquire + release with no contention. "hot": one hand-off on a
# contended key (the holder's release reaches the leader .. the next holder sends its release).
# A one-way message each way of a hand-off (release in, grant out) makes one client round trip.
PATH = {
    # (client RTTs, replica RTTs, fsyncs)
    ("picket", "c1"): (2, 2, 2),    # lock: request, accept+ack (fsync), grant; release: the same
    ("picket", "hot"): (1, 1, 1),   # release in, accept+ack (fsync), next holder's grant out
    ("etcd", "c1"): (2, 2, 2),      # Lock: txn put (raft append, fsync); Unlock: delete (append, fsync)
    ("etcd", "hot"): (1, 2, 1),     # Unlock in, append (fsync), waiter's linearizable Get (ReadIndex), Lock out
    ("zookeeper", "c1"): (3, 2, 2),  # create (proposal+ack, fsync), getChildren, delete (proposal+ack, fsync)
    ("zookeeper", "hot"): (2, 1, 1),  # delete in, proposal+ack (fsync), watch event out, getChildren
}
NOTES = {
    ("etcd", "hot"): "a hand-off can also wait for etcd's 100 ms unsynced-watch timer",
}


def parse_counts(lines):
    """{system: {"idle": (capture_s, counts), shape: {ops_per_client: (clients, wall_s, capture_s, counts)}}}"""
    out = {}
    for line in lines:
        f = line.split()
        if len(f) != 10:
            continue
        system, shape = f[0], f[1]
        clients, n = int(f[2]), int(f[3])
        wall, cap = float(f[4]), float(f[5])
        counts = tuple(int(x) for x in f[6:10])
        if shape == "idle":
            out.setdefault(system, {})["idle"] = (cap, counts)
        else:
            out.setdefault(system, {}).setdefault(shape, {})[n] = (clients, wall, cap, counts)
    return out


def per_op(runs, idle):
    """Per operation from the smallest and largest run of one shape: the difference of the
    counts, less the heartbeats of the difference of the captures' lengths, over the difference
    of the op counts. Answers (ops, [to_server, to_client, peer, other] per op, ops/s measured)."""
    if len(runs) < 2:
        return None
    a, b = min(runs), max(runs)
    ca, wa, pa, xa = runs[a]
    cb, wb, pb, xb = runs[b]
    ops = cb * b - ca * a
    if ops <= 0:
        return None
    idle_s, idle_counts = idle if idle else (1.0, (0, 0, 0, 0))
    rate = [c / idle_s for c in idle_counts]
    per = [(xb[i] - xa[i] - rate[i] * (pb - pa)) / ops for i in range(4)]
    measured = ops / (wb - wa) if wb > wa else float("nan")
    return ops, per, measured


def probe_p50(lines, label):
    for line in lines:
        f = line.split()
        if len(f) == 5 and f[0] == "probe" and f[1] == label:
            return float(f[3])
    return None


def projection(measured, lan, fsync, basis):
    print()
    print(f"PROJECTION, not a measurement: a LAN with a {lan} ms round trip; per op = RTTs x {lan} ms + "
          f"fsyncs x {fsync:.3f} ms ({basis}); CPU and queueing left out")
    print("| system | shape | RTTs | fsyncs | projected ms | projected ops/s (LAN) | measured ops/s (loopback, this run) |")
    print("|---|---|---|---|---|---|---|")
    for (system, kind), (c, r, s) in PATH.items():
        if (system, kind) not in measured:
            continue
        shape, _, rate = measured[(system, kind)]
        ms = (c + r) * lan + s * fsync
        note = f" ({NOTES[(system, kind)]})" if (system, kind) in NOTES else ""
        print(f"| {system} | {shape} | {c + r} | {s} | {ms:.3f} | {1000 / ms:.0f}{note} | {rate:.0f} |")


def shape_kind(shape):
    return "c1" if shape.endswith("-c1") else "hot"


def main(counts_path, probes_path, lan_rtt_ms, given_fsync=None):
    data = parse_counts(open(counts_path))
    probes = open(probes_path).read().splitlines()
    fsync = probe_p50(probes, "fsync")
    lan = float(lan_rtt_ms)
    print("Messages per lock operation (acquire + release), counted on loopback: TCP segments with payload,")
    print("heartbeats (an idle capture's rate) subtracted; per op = (large run - small run) / their op difference")
    print("| system | shape | ops counted | client->server | server->client | replica<->replica | total | measured ops/s | idle segments/s |")
    print("|---|---|---|---|---|---|---|---|---|")
    measured = {}
    for system in ("picket", "etcd", "zookeeper"):
        if system not in data:
            continue
        idle = data[system].get("idle")
        idle_rate = sum(idle[1][:3]) / idle[0] if idle and idle[0] > 0 else float("nan")
        for shape, runs in data[system].items():
            if shape == "idle":
                continue
            r = per_op(runs, idle)
            if r is None:
                continue
            ops, per, rate = r
            measured[(system, shape_kind(shape))] = (shape, per, rate)
            print(f"| {system} | {shape} | {ops} | {per[0]:.2f} | {per[1]:.2f} | {per[2]:.2f} | "
                  f"{per[0] + per[1] + per[2]:.2f} | {rate:.0f} | {idle_rate:.1f} |")
    print()
    print("Sequential round trips on the critical path (from the protocol; the counts above are the check)")
    print("| system | per | client RTTs | replica RTTs | total RTTs | fsyncs on the path |")
    print("|---|---|---|---|---|---|")
    for (system, kind), (c, r, s) in PATH.items():
        if (system, kind) not in measured:
            continue
        per = "op (lock-1key-c1)" if kind == "c1" else "hand-off (hot key)"
        print(f"| {system} | {per} | {c} | {r} | {c + r} | {s} |")
    if fsync is None and given_fsync is None:
        print("\n(no fsync probe: no projection)")
    if fsync is not None:
        projection(measured, lan, fsync, "the fdatasync p50 probed in this run")
    if given_fsync is not None:
        projection(measured, lan, float(given_fsync), "given with --fsync-ms, not probed in this run")
    best = {}
    for (system, kind), (c, r, _) in PATH.items():
        if (system, kind) in measured:
            best.setdefault(kind, []).append((c + r, system))
    for kind, xs in sorted(best.items()):
        xs.sort()
        fewest = [s for n, s in xs if n == xs[0][0]]
        what = "per hand-off (hot key)" if kind == "hot" else "per lock-1key-c1 op"
        print(f"fewest round trips {what}: {', '.join(fewest)} ({xs[0][0]}); "
              + ", ".join(f"{s} {n}" for n, s in xs))


if __name__ == "__main__":
    if len(sys.argv) not in (4, 5):
        sys.exit(__doc__)
    main(*sys.argv[1:])
