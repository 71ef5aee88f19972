"""ASHA's promotions against a table worked out by hand (eta 3, rungs 1, 3, 9)."""
import json
import math
import os
import sys
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "scripts"))
from sweeplib.asha import Asha  # noqa: E402


class AshaTest(unittest.TestCase):
    def test_rungs(self):
        self.assertEqual(Asha(1, 9, 3).rungs, [1, 3, 9])
        self.assertEqual(Asha(10, 100, 3).rungs, [10, 30, 90, 100])
        self.assertEqual(Asha(5, 5, 2).rungs, [5])
        with self.assertRaises(ValueError):
            Asha(0, 9)
        with self.assertRaises(ValueError):
            Asha(1, 9, eta=1)

    def test_hand_computed_sequence(self):
        a = Asha(1, 9, eta=3)
        # (what arrives, the job ASHA gives next): worked out by hand.
        #   rung 0 after t0..t2 = 5, 4, 6: n 3, top 1 -> t1 (4.0) promoted to rung 1
        #   t3 = 3: n 4, top 1 -> t3 promoted; t4 = 7: n 5, top 1 = t3, done -> new trial
        #   t5 = 3.5: n 6, top 2 = {t3, t5} -> t5 promoted
        #   rung 1: t1 = 3.8, t3 = 2.9, t5 = 3.3: n 3, top 1 -> t3 promoted to rung 2 (9 steps)
        #   t6 = 2.0 at rung 0: n 7, top 2 = {t6, t3} -> t6 promoted (rung 1 has nothing new)
        steps = [
            ((0, 0, 5.0), ("new", None, 0)),
            ((1, 0, 4.0), ("new", None, 0)),
            ((2, 0, 6.0), ("promote", 1, 1)),
            ((3, 0, 3.0), ("promote", 3, 1)),
            ((4, 0, 7.0), ("new", None, 0)),
            ((5, 0, 3.5), ("promote", 5, 1)),
            ((1, 1, 3.8), ("new", None, 0)),
            ((3, 1, 2.9), ("new", None, 0)),
            ((5, 1, 3.3), ("promote", 3, 2)),
            ((6, 0, 2.0), ("promote", 6, 1)),
        ]
        for (trial, rung, metric), want in steps:
            a.record(trial, rung, metric)
            self.assertEqual(a.next_job(), want, f"after trial {trial} at rung {rung} = {metric}")
        self.assertIsNone(a.next_job(can_start_new=False))
        self.assertEqual([a.stopped_at(t) for t in range(7)], [0, 1, 0, 1, 0, 1, 0])

    def test_maximising_and_non_finite(self):
        a = Asha(1, 3, eta=3, mode="max")
        for t, m in enumerate([0.1, math.nan, 0.5]):
            a.record(t, 0, m)
        self.assertEqual(a.next_job(), ("promote", 2, 1))
        b = Asha(1, 3, eta=3)
        for t, m in enumerate([math.inf, math.nan, 9.0]):
            b.record(t, 0, m)
        self.assertEqual(b.next_job(), ("promote", 2, 1))  # non-finite ranks last
        c = Asha(1, 3, eta=3)
        for t in range(3):
            c.record(t, 0, math.nan)  # failed trials are never promoted
        self.assertEqual(c.next_job(), ("new", None, 0))

    def test_drained_sweep_still_reaches_the_top(self):
        # 4 trials, eta 3: rung 0 promotes floor(4/3) = 1 (t1); alone at rung 1 it would never be
        # promoted (floor(1/3) = 0), so a sweep with nothing left to run would end with no trial at
        # 9 steps. Drained (nothing pending or training), the best of a rung goes up anyway, once.
        a = Asha(1, 9, eta=3)
        for t, m in enumerate([5.0, 4.0, 6.0, 7.0]):
            a.record(t, 0, m)
        self.assertEqual(a.next_job(can_start_new=False), ("promote", 1, 1))
        a.record(1, 1, 3.0)
        self.assertIsNone(a.next_job(can_start_new=False))
        self.assertEqual(a.next_job(can_start_new=False, drained=True), ("promote", 1, 2))
        a.record(1, 2, 2.5)
        self.assertIsNone(a.next_job(can_start_new=False, drained=True))  # t1 was rung 0's best: no more

    def test_state_round_trip(self):
        a = Asha(1, 9, eta=3)
        for t, m in enumerate([5.0, 4.0, 6.0]):
            a.record(t, 0, m)
        self.assertEqual(a.next_job(), ("promote", 1, 1))
        b = Asha.from_state(json.loads(json.dumps(a.state())))
        b.record(3, 0, 3.0)
        self.assertEqual(b.next_job(), ("promote", 3, 1))
        self.assertEqual(b.promoted[0], {1, 3})


if __name__ == "__main__":
    unittest.main()
