"""Search spaces: reproducible from the sweep's seed, every kind in its range, bad input named."""
import math
import os
import sys
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "scripts"))
from sweeplib.space import SpaceError, expand  # noqa: E402

SPACE = {
    "optim.lr": {"loguniform": [1e-4, 3e-2]},
    "optim.weight_decay": {"uniform": [0.0, 0.2]},
    "train.micro_batch": {"choice": [4, 8]},
    "model.n_layer": {"int": [2, 6]},
    "optim.beta2": {"grid": [0.95, 0.99]},
    "train.seed": {"seeds": 2},
}


class SpaceTest(unittest.TestCase):
    def test_counts_ranges_and_reproducibility(self):
        trials = expand(SPACE, samples=5, seed=7)
        self.assertEqual(len(trials), 2 * 2 * 5)  # grid x seeds x samples
        self.assertEqual(trials, expand(SPACE, samples=5, seed=7))
        self.assertNotEqual(trials, expand(SPACE, samples=5, seed=8))
        for t in trials:
            self.assertTrue(1e-4 <= t["optim.lr"] <= 3e-2)
            self.assertTrue(0.0 <= t["optim.weight_decay"] <= 0.2)
            self.assertIn(t["train.micro_batch"], (4, 8))
            self.assertIn(t["model.n_layer"], range(2, 7))
            self.assertIn(t["optim.beta2"], (0.95, 0.99))
            self.assertIn(t["train.seed"], (1, 2))
        # Every grid point and seed is crossed with the same 5 draws.
        draws = {(t["optim.lr"], t["model.n_layer"]) for t in trials}
        self.assertEqual(len(draws), 5)
        # loguniform spreads over the decades: 200 draws land in all of them.
        lrs = [t["optim.lr"] for t in expand({"optim.lr": {"loguniform": [1e-4, 1e-1]}}, samples=200)]
        self.assertEqual({math.floor(math.log10(v)) for v in lrs}, {-4, -3, -2})

    def test_grid_only(self):
        self.assertEqual(expand({"optim.lr": {"grid": [1, 2, 3]}}), [{"optim.lr": 1}, {"optim.lr": 2}, {"optim.lr": 3}])

    def test_errors_name_the_key(self):
        bad = [
            ({"lr": {"grid": [1]}}, "space key 'lr'"),
            ({"optim.lr": {"normal": [0, 1]}}, "space.optim.lr"),
            ({"optim.lr": {"loguniform": [0, 1]}}, "space.optim.lr.loguniform"),
            ({"optim.lr": {"uniform": [2, 1]}}, "low 2 is above high 1"),
            ({"model.n_layer": {"int": [1.5, 3]}}, "space.model.n_layer.int"),
            ({"train.seed": {"seeds": 0}}, "space.train.seed.seeds"),
            ({"optim.lr": {"choice": []}}, "space.optim.lr.choice"),
        ]
        for space, text in bad:
            with self.assertRaises(SpaceError) as e:
                expand(space)
            self.assertIn(text, str(e.exception))


class SpecFileTest(unittest.TestCase):
    def test_exponents_without_a_dot_are_numbers(self):
        # PyYAML alone (YAML 1.1) reads 1e-4 as the string '1e-4'; Loom's recipes read a number.
        import importlib.machinery
        import importlib.util
        import tempfile
        path = os.path.join(os.path.dirname(__file__), "..", "..", "scripts", "sweep")
        loader = importlib.machinery.SourceFileLoader("sweep_cli", path)
        mod = importlib.util.module_from_spec(importlib.util.spec_from_loader("sweep_cli", loader))
        loader.exec_module(mod)
        with tempfile.NamedTemporaryFile("w", suffix=".yaml", delete=False) as f:
            recipe = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", "configs", "tiny.yaml"))
            f.write(f"recipe: {recipe}\nmax_steps: 20\n" "scheduler: {kind: asha, min_steps: 10}\n"
                    "space: {optim.lr: {loguniform: [1e-4, 1E-2]}, train.micro_batch: {choice: [4, 8]}}\n")
        spec, _ = mod.load_spec(f.name)
        os.unlink(f.name)
        self.assertEqual(spec["space"]["optim.lr"], {"loguniform": [1e-4, 1e-2]})
        self.assertEqual(spec["space"]["train.micro_batch"], {"choice": [4, 8]})
        self.assertIsInstance(spec["max_steps"], int)


if __name__ == "__main__":
    unittest.main()
