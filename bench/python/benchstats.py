"""What lockbench.py and kazoo_lockbench.py share: the percentile convention of the reference
workload (nearest rank over the counting window's latencies, in seconds; reported in ms)."""


def percentile_ms(latencies, p):
    if not latencies:
        return 0.0
    ordered = sorted(latencies)
    index = min(len(ordered) - 1, int(round(p / 100.0 * (len(ordered) - 1))))
    return ordered[index] * 1000.0
