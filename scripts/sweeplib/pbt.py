"""Population-based training (Jaderberg et al. 2017, "Population Based Training of Neural
Networks"), in synchronous generations.

Every trial of the population trains `interval` steps at a time. When all live trials have
reported their metric at step g*interval, the bottom `quantile` of them each exploit a trial of
the top `quantile` (chosen at random, seeded): they continue from that donor's checkpoint of
that step with the donor's hyperparameters, explored (perturbed): numbers multiplied by one of
`factors` (0.8 or 1.2 by default; integers rounded, kept >= 1 if they were), choices and grid
values resampled from their list with probability `resample_probability`. Seeds are not
perturbed. The lineage (who copied whom, at which step, with which values) is recorded.

Pure bookkeeping, no I/O: the controller copies the checkpoint and persists state() itself.
Synchronous rather than asynchronous because generations make every decision reproducible
from the sweep's seed, whatever the order the trials finish in.
"""
import math
import random


class Pbt:
    def __init__(self, interval, max_steps, space, quantile=0.25, factors=(0.8, 1.2),
                 resample_probability=0.25, seed=0, mode="min"):
        if interval < 1 or max_steps < interval:
            raise ValueError(f"PBT needs 1 <= interval <= max_steps, got {interval}, {max_steps}")
        if not 0 < quantile <= 0.5:
            raise ValueError(f"PBT's quantile must be in (0, 0.5], got {quantile}")
        self.interval, self.max_steps, self.space = interval, max_steps, space
        self.quantile, self.factors, self.resample_probability = quantile, list(factors), resample_probability
        self.seed, self.mode = seed, mode
        self.results = {}   # step -> {trial: metric}
        self.lineage = []   # {"step", "trial", "donor", "before", "after"}

    def targets(self):
        """The steps at which generations end: interval, 2*interval, ..., max_steps."""
        out = list(range(self.interval, self.max_steps, self.interval))
        return out + [self.max_steps]

    def next_target(self, step):
        return next(t for t in self.targets() if t > step)

    def record(self, trial, step, metric):
        self.results.setdefault(step, {})[trial] = metric

    def generation_complete(self, step, live):
        """Whether every live trial has reported at `step`."""
        got = self.results.get(step, {})
        return all(t in got for t in live)

    def _order(self, step, live):
        def key(t):
            m = self.results[step][t]
            bad = m is None or not math.isfinite(m)
            return (bad, 0.0 if bad else (m if self.mode == "min" else -m), t)
        return sorted(live, key=key)

    def exploit(self, step, live, params):
        """The decisions at the end of the generation at `step`: a list of (trial, donor,
        new params) for the bottom quantile, recorded in the lineage. `params`: trial -> its
        current hyperparameters."""
        order = self._order(step, live)
        n = len(order)
        k = int(math.floor(n * self.quantile)) if n >= 2 else 0
        if n >= 2 and k == 0:
            k = 1  # a population smaller than 1/quantile still replaces its worst member
        rng = random.Random(f"{self.seed}/pbt/{step}")
        top, bottom = order[:k], order[n - k:]
        out = []
        for t in bottom:
            donor = top[rng.randrange(len(top))]
            new = self.explore(params[donor], rng)
            self.lineage.append({"step": step, "trial": t, "donor": donor, "before": params[t], "after": new,
                                 "metric": self.results[step][t], "donor_metric": self.results[step][donor]})
            out.append((t, donor, new))
        return out

    def explore(self, params, rng):
        new = {}
        for key, value in sorted(params.items()):
            kind, arg = next(iter(self.space[key].items())) if key in self.space else ("fixed", None)
            if kind in ("choice", "grid"):
                new[key] = arg[rng.randrange(len(arg))] if rng.random() < self.resample_probability else value
            elif kind in ("uniform", "loguniform"):
                new[key] = value * self.factors[rng.randrange(len(self.factors))]
            elif kind == "int":
                v = int(round(value * self.factors[rng.randrange(len(self.factors))]))
                new[key] = max(v, 1) if value >= 1 else v
            else:  # seeds and anything not in the space
                new[key] = value
        return new

    def state(self):
        return {"interval": self.interval, "max_steps": self.max_steps, "quantile": self.quantile,
                "factors": self.factors, "resample_probability": self.resample_probability, "seed": self.seed,
                "mode": self.mode, "results": {str(s): {str(t): m for t, m in r.items()} for s, r in self.results.items()},
                "lineage": self.lineage}

    @classmethod
    def from_state(cls, s, space):
        p = cls(s["interval"], s["max_steps"], space, s["quantile"], s["factors"], s["resample_probability"],
                s["seed"], s["mode"])
        p.results = {int(st): {int(t): m for t, m in r.items()} for st, r in s["results"].items()}
        p.lineage = s["lineage"]
        return p
