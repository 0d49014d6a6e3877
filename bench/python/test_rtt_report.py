"""Unit test of rtt_report's arithmetic (run: python3 -m unittest bench/python/test_rtt_report.py;
a benchmark helper, not part of scripts/test)."""

import os
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import rtt_report  # noqa: E402


class PerOp(unittest.TestCase):
    def test_setup_cancels_and_heartbeats_are_subtracted(self):
        lines = [
            # 10 segments/s of peer heartbeats when idle
            "sys idle 0 0 0 2.0 0 0 20 0",
            # setup costs 7/5/3 segments in both runs; 2 + 2 client and 6 peer segments per op;
            # the large run's capture is 1 s longer (10 more heartbeat segments)
            "sys lock-1key-c1 1 100 1.0 1.5 207 205 613 0",
            "sys lock-1key-c1 1 600 3.0 2.5 1207 1205 3623 1",
            "sys lock-1key-c4 4 3 0.5 1.0 31 29 75 0",
            "sys lock-1key-c4 4 13 1.5 2.0 111 109 325 0",
        ]
        data = rtt_report.parse_counts(lines)
        ops, per, rate = rtt_report.per_op(data["sys"]["lock-1key-c1"], data["sys"]["idle"])
        self.assertEqual(ops, 500)
        self.assertAlmostEqual(per[0], 2.0)
        self.assertAlmostEqual(per[1], 2.0)
        self.assertAlmostEqual(per[2], 6.0)
        self.assertAlmostEqual(per[3], 1 / 500)
        self.assertAlmostEqual(rate, 250.0)
        ops, per, _ = rtt_report.per_op(data["sys"]["lock-1key-c4"], data["sys"]["idle"])
        self.assertEqual(ops, 40)  # 4 clients x (13 - 3)
        self.assertAlmostEqual(per[2], (250 - 10) / 40)

    def test_one_run_gives_no_figure(self):
        data = rtt_report.parse_counts(["sys lock-1key-c1 1 100 1.0 1.5 207 205 613 0"])
        self.assertIsNone(rtt_report.per_op(data["sys"]["lock-1key-c1"], None))


if __name__ == "__main__":
    unittest.main()
