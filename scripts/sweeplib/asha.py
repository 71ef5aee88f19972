"""Asynchronous successive halving (ASHA; Li et al., "A System for Massively Parallel
Hyperparameter Tuning", MLSys 2020), promotion-based.

Rungs are training-step milestones r, r*eta, r*eta^2, ... up to max_steps (which is the last
rung even when it is not a power of eta times r). Every trial starts at rung 0. Whenever a worker
is free the controller asks next_job(): going down from the highest rung below the top, a trial
recorded at rung k that ranks within the best floor(n_k / eta) of the n_k trials recorded there
so far, and has not been promoted yet, is promoted to rung k+1 (it resumes from its checkpoint
and trains on to that rung's steps); if none qualifies a new trial starts at rung 0, while the
sweep has trials left to start. Trials never promoted are the ones ASHA stopped.

Pure bookkeeping, no I/O: the controller records results and persists state() itself.
"""
import math


class Asha:
    def __init__(self, min_steps, max_steps, eta=3, mode="min"):
        if min_steps < 1 or max_steps < min_steps:
            raise ValueError(f"ASHA needs 1 <= min_steps <= max_steps, got {min_steps}, {max_steps}")
        if eta < 2:
            raise ValueError(f"ASHA's eta must be >= 2, got {eta}")
        if mode not in ("min", "max"):
            raise ValueError(f"mode must be min or max, got {mode}")
        self.eta, self.mode = eta, mode
        self.rungs = []
        m = min_steps
        while m < max_steps:
            self.rungs.append(m)
            m *= eta
        self.rungs.append(max_steps)
        self.results = [dict() for _ in self.rungs]  # rung -> {trial: metric}
        self.promoted = [set() for _ in self.rungs]  # rung -> trials promoted out of it

    def record(self, trial, rung, metric):
        """`trial` reached rungs[rung] steps with `metric` (NaN/inf: ranked last)."""
        if not 0 <= rung < len(self.rungs):
            raise ValueError(f"no rung {rung} (rungs: {self.rungs})")
        self.results[rung][trial] = metric

    def _order(self, rung):
        # Best first; a non-finite metric last; ties by trial id (deterministic).
        def key(item):
            trial, m = item
            bad = m is None or not math.isfinite(m)
            return (bad, 0.0 if bad else (m if self.mode == "min" else -m), trial)
        return [t for t, _ in sorted(self.results[rung].items(), key=key)]

    def promotable(self, rung, drained=False):
        """The best trial of `rung` that ASHA would promote now (None if none). `drained`: no
        trial is left to start and none is training, so no more results will come to this rung:
        its best trial goes up even when there are fewer than eta of them (without this a finite
        sweep could end with no trial trained to max_steps)."""
        if rung >= len(self.rungs) - 1:
            return None
        order = self._order(rung)
        top = max(len(order) // self.eta, 1 if drained else 0)
        for t in order[:top]:
            m = self.results[rung][t]
            if t not in self.promoted[rung] and m is not None and math.isfinite(m):  # never a failed trial
                return t
        return None

    def next_job(self, can_start_new=True, drained=False):
        """("promote", trial, rung) to train `trial` on to rungs[rung]; ("new", None, 0) to start a
        trial; None when there is nothing to do now."""
        for k in range(len(self.rungs) - 2, -1, -1):
            t = self.promotable(k, drained and not can_start_new)
            if t is not None:
                self.promoted[k].add(t)
                return ("promote", t, k + 1)
        return ("new", None, 0) if can_start_new else None

    def stopped_at(self, trial):
        """The highest rung `trial` reached (its stopping rung if it is not training on)."""
        reached = [k for k, r in enumerate(self.results) if trial in r]
        return max(reached) if reached else None

    def state(self):
        return {"rungs": self.rungs, "eta": self.eta, "mode": self.mode,
                "results": [{str(t): m for t, m in r.items()} for r in self.results],
                "promoted": [sorted(p) for p in self.promoted]}

    @classmethod
    def from_state(cls, s):
        a = cls(s["rungs"][0], s["rungs"][-1], s["eta"], s["mode"])
        if a.rungs != s["rungs"]:
            raise ValueError(f"saved rungs {s['rungs']} differ from {a.rungs}")
        a.results = [{int(t): m for t, m in r.items()} for r in s["results"]]
        a.promoted = [set(p) for p in s["promoted"]]
        return a
