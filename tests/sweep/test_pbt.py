"""PBT's exploit and explore decisions (scripts/sweeplib/pbt.py) against hand-worked cases."""
import json
import math
import os
import sys
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "scripts"))
from sweeplib.pbt import Pbt  # noqa: E402

SPACE = {"optim.lr": {"loguniform": [1e-4, 1e-2]}, "train.micro_batch": {"choice": [4, 8]},
         "model.n_layer": {"int": [2, 6]}, "train.seed": {"seeds": 2}}


class PbtTest(unittest.TestCase):
    def test_generations(self):
        p = Pbt(20, 50, SPACE)
        self.assertEqual(p.targets(), [20, 40, 50])
        self.assertEqual(p.next_target(20), 40)
        self.assertEqual(p.next_target(40), 50)
        with self.assertRaises(ValueError):
            Pbt(0, 50, SPACE)
        with self.assertRaises(ValueError):
            Pbt(10, 50, SPACE, quantile=0.6)

    def test_bottom_quarter_copies_the_top_quarter(self):
        p = Pbt(10, 30, SPACE, quantile=0.25, seed=3)
        params = {t: {"optim.lr": 1e-3 * (t + 1), "train.micro_batch": 4, "model.n_layer": 4, "train.seed": 1}
                  for t in range(8)}
        # Losses at step 10: trial 5 best, then 2; trial 7 failed (NaN), 0 worst of the finite.
        for t, m in enumerate([9.0, 5.0, 3.0, 6.0, 4.0, 1.0, 7.0, math.nan]):
            p.record(t, 10, m)
        self.assertFalse(p.generation_complete(10, range(9)))
        self.assertTrue(p.generation_complete(10, range(8)))
        out = p.exploit(10, list(range(8)), params)
        # n 8, quantile 0.25: k 2; bottom = {0 (9.0), 7 (NaN)}, donors from top = {5, 2}.
        self.assertEqual(sorted(t for t, _, _ in out), [0, 7])
        for t, donor, new in out:
            self.assertIn(donor, (5, 2))
            ratio = new["optim.lr"] / params[donor]["optim.lr"]
            self.assertTrue(math.isclose(ratio, 0.8) or math.isclose(ratio, 1.2), ratio)
            self.assertIn(new["model.n_layer"], (3, 5))     # 4 * 0.8 = 3.2 -> 3, 4 * 1.2 = 4.8 -> 5
            self.assertIn(new["train.micro_batch"], (4, 8))  # a choice: kept or resampled
            self.assertEqual(new["train.seed"], 1)           # seeds are never perturbed
        self.assertEqual([(e["trial"], e["step"]) for e in p.lineage], [(t, 10) for t, _, _ in out])
        # Reproducible: the same seed and results give the same decisions.
        q = Pbt.from_state(json.loads(json.dumps(p.state())), SPACE)
        q.lineage = []
        self.assertEqual(q.exploit(10, list(range(8)), params), out)

    def test_small_population_replaces_its_worst(self):
        p = Pbt(5, 10, SPACE)
        for t, m in enumerate([2.0, 1.0, 3.0]):
            p.record(t, 5, m)
        params = {t: {"optim.lr": 1e-3} for t in range(3)}
        out = p.exploit(5, [0, 1, 2], params)
        self.assertEqual([(t, d) for t, d, _ in out], [(2, 1)])  # floor(3 * 0.25) = 0 -> still 1


if __name__ == "__main__":
    unittest.main()
