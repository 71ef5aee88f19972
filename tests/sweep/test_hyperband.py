"""HyperBand's brackets and the median stopping rule, by hand."""
import os
import sys
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "scripts"))
from sweeplib.hyperband import HyperBand, median_stop  # noqa: E402


class HyperBandTest(unittest.TestCase):
    def test_brackets(self):
        hb = HyperBand(1, 27, eta=3)
        self.assertEqual([b.rungs for b in hb.brackets], [[1, 3, 9, 27], [3, 9, 27], [9, 27], [27]])
        self.assertEqual([hb.place(t) for t in range(6)], [0, 1, 2, 3, 0, 1])
        self.assertEqual(hb.rungs(5), [3, 9, 27])

    def test_promotions_stay_in_their_bracket(self):
        hb = HyperBand(1, 9, eta=3)  # brackets [1, 3, 9], [3, 9], [9]
        for t in range(9):
            hb.place(t)
        # Bracket 0 holds trials 0, 3, 6; bracket 1 holds 1, 4, 7.
        for t, m in ((0, 5.0), (3, 4.0), (6, 6.0)):
            hb.record(t, 0, m)
        self.assertEqual(hb.next_job(), ("promote", 3, 1))
        for t, m in ((1, 1.0), (4, 2.0)):
            hb.record(t, 0, m)
        self.assertEqual(hb.next_job(), ("new", None, 0))  # bracket 1 has 2 results: top 0
        hb.record(7, 0, 3.0)
        self.assertEqual(hb.next_job(), ("promote", 1, 1))
        self.assertIsNone(hb.next_job(can_start_new=False))


class MedianStopTest(unittest.TestCase):
    HISTORY = {
        "a": [(1, 5.0), (2, 4.0), (3, 3.0)],   # running means at 3: 4.0
        "b": [(1, 5.0), (2, 4.5), (3, 4.0)],   # 4.5
        "c": [(1, 6.0), (2, 5.5), (3, 5.0)],   # 5.5
        "d": [(1, 6.0), (2, 6.0), (3, 6.0)],   # best 6.0
        "e": [(1, 3.0)],                        # has not reached step 3
    }

    def test_rule(self):
        h = self.HISTORY
        # d at 3: the others that reached 3 (a, b, c) have running means 4.0, 4.5, 5.5: median 4.5 < 6.0
        self.assertTrue(median_stop("d", 3, h))
        self.assertFalse(median_stop("a", 3, h))   # best 3.0 <= median of (4.5, 5.5, 6.0) = 5.5
        self.assertFalse(median_stop("d", 3, h, grace_steps=4))
        self.assertFalse(median_stop("d", 3, h, min_trials=4))
        # Maximising the negated metric gives the same decisions.
        negated = {k: [(s, -m) for s, m in v] for k, v in h.items()}
        self.assertTrue(median_stop("d", 3, negated, mode="max"))
        self.assertFalse(median_stop("a", 3, negated, mode="max"))


if __name__ == "__main__":
    unittest.main()
