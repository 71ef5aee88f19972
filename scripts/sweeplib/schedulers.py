"""The schedulers as the controller sees them: each decides which trial trains next and up to
which step (a segment), takes the metric a segment ended with, and says why a trial stopped.

  asha       asynchronous successive halving (asha.py): segments end at the rungs
  hyperband  brackets of ASHA (hyperband.py)
  median     every trial trains to max_steps in one segment, evaluated every `eval_every` steps;
             the controller stops one (a graceful stop: final checkpoint) when the median rule
             says so (hyperband.median_stop)
  pbt        population-based training (pbt.py): segments of `interval` steps; between them the
             bottom of the population copies the top's checkpoints

next_job(pending, drained) -> (trial, target step, exploit) or None (drained: nothing is
training and nothing new can start, so no further result will come), where exploit is None or
(donor, new params) for the controller to carry out (copy the donor's checkpoint) before the
segment starts. All state is in state() for the controller's state.json.
"""
import math

from .asha import Asha
from .hyperband import HyperBand, median_stop
from .pbt import Pbt

KINDS = ("asha", "hyperband", "median", "pbt")


class AshaScheduler:
    watches = False

    def __init__(self, cfg, max_steps, mode, space, seed, state=None):
        if state:
            self.asha, self.rung = Asha.from_state(state["asha"]), {int(t): r for t, r in state["rung"].items()}
        else:
            self.asha, self.rung = Asha(cfg.get("min_steps", 1), max_steps, cfg.get("eta", 3), mode), {}

    def _rungs(self, trial):
        return self.asha.rungs

    def next_job(self, pending, drained=False):
        job = self.asha.next_job(can_start_new=bool(pending), drained=drained)
        if job is None:
            return None
        kind, trial, rung = job
        if kind == "new":
            trial = pending[0]
        self.rung[trial] = rung
        return trial, self._rungs(trial)[rung], None

    def _record(self, trial, metric):
        self.asha.record(trial, self.rung[trial], metric)

    def report(self, trial, steps, metric):
        self._record(trial, metric)
        return "done" if self.rung[trial] == len(self._rungs(trial)) - 1 else "paused"

    def fail(self, trial):
        self._record(trial, float("nan"))

    def why_stopped(self, trial):
        return f"ASHA: not in the best 1/{self.asha.eta} at {self._rungs(trial)[self.rung[trial]]} steps"

    def state(self):
        return {"asha": self.asha.state(), "rung": {str(t): r for t, r in self.rung.items()}}


class HyperBandScheduler(AshaScheduler):
    def __init__(self, cfg, max_steps, mode, space, seed, state=None):
        self.hb = HyperBand(cfg.get("min_steps", 1), max_steps, cfg.get("eta", 3), mode)
        self.rung = {}
        if state:
            for b, s in zip(self.hb.brackets, state["brackets"]):
                b.__dict__.update(Asha.from_state(s).__dict__)
            self.hb.bracket_of = {int(t): b for t, b in state["bracket_of"].items()}
            self.hb.started = state["started"]
            self.rung = {int(t): r for t, r in state["rung"].items()}

    def _rungs(self, trial):
        return self.hb.rungs(trial)

    def next_job(self, pending, drained=False):
        for bracket in self.hb.brackets:
            job = bracket.next_job(can_start_new=False, drained=drained and not pending)
            if job:
                _, trial, rung = job
                self.rung[trial] = rung
                return trial, self._rungs(trial)[rung], None
        if not pending:
            return None
        self.hb.place(pending[0])
        self.rung[pending[0]] = 0
        return pending[0], self._rungs(pending[0])[0], None

    def _record(self, trial, metric):
        self.hb.record(trial, self.rung[trial], metric)

    def why_stopped(self, trial):
        b = self.hb.bracket_of[trial]
        return (f"HyperBand bracket {b}: not in the best 1/{self.hb.brackets[b].eta} at "
                f"{self._rungs(trial)[self.rung[trial]]} steps")

    def state(self):
        return {"brackets": [b.state() for b in self.hb.brackets],
                "bracket_of": {str(t): b for t, b in self.hb.bracket_of.items()}, "started": self.hb.started,
                "rung": {str(t): r for t, r in self.rung.items()}}


class MedianScheduler:
    watches = True

    def __init__(self, cfg, max_steps, mode, space, seed, state=None):
        self.max_steps, self.mode = max_steps, mode
        self.eval_every = cfg.get("eval_every", max(1, max_steps // 10))
        self.grace_steps, self.min_trials = cfg.get("grace_steps", self.eval_every), cfg.get("min_trials", 3)
        self.stops = {int(t): w for t, w in (state or {}).get("stops", {}).items()}

    def next_job(self, pending, drained=False):
        return (pending[0], self.max_steps, None) if pending else None

    def report(self, trial, steps, metric):
        return "done"

    def fail(self, trial):
        pass

    def should_stop(self, trial, step, history):
        """history: trial -> [(step, metric)] of every trial so far (running ones included)."""
        if trial in self.stops or not median_stop(trial, step, history, self.grace_steps, self.min_trials, self.mode):
            return False
        best = (min if self.mode == "min" else max)(m for s, m in history[trial] if s <= step and math.isfinite(m))
        self.stops[trial] = f"median rule at step {step}: best {best:.4g} is worse than the median of the others' running means"
        return True

    def why_stopped(self, trial):
        return self.stops.get(trial, "median rule")

    def state(self):
        return {"stops": {str(t): w for t, w in self.stops.items()}}


class PbtScheduler:
    watches = False

    def __init__(self, cfg, max_steps, mode, space, seed, state=None):
        if state:
            self.pbt = Pbt.from_state(state["pbt"], space)
            self.queue, self.decided, self.live = state["queue"], set(state["decided"]), set(state["live"])
        else:
            self.pbt = Pbt(cfg.get("interval", max(1, max_steps // 4)), max_steps, space, cfg.get("quantile", 0.25),
                           cfg.get("factors", [0.8, 1.2]), cfg.get("resample_probability", 0.25), seed, mode)
            self.queue, self.decided, self.live = [], set(), set()
        self.params = {}  # trial -> current params (the controller sets it before next_job)

    def next_job(self, pending, drained=False):
        if pending:
            self.live.add(pending[0])
            return pending[0], self.pbt.targets()[0], None
        if not self.queue:
            for step in self.pbt.targets()[:-1]:
                if step in self.decided or not self.live or not self.pbt.generation_complete(step, self.live):
                    continue
                self.decided.add(step)
                exploits = {t: (donor, new) for t, donor, new in self.pbt.exploit(step, sorted(self.live), self.params)}
                nxt = self.pbt.next_target(step)
                self.queue = [[t, nxt, list(exploits[t]) if t in exploits else None] for t in sorted(self.live)]
                break
        if not self.queue:
            return None
        t, target, exploit = self.queue.pop(0)
        return t, target, (tuple(exploit) if exploit else None)

    def report(self, trial, steps, metric):
        self.pbt.record(trial, steps, metric)
        return "done" if steps == self.pbt.max_steps else "paused"

    def fail(self, trial):
        self.live.discard(trial)  # out of the population; the others go on without it

    def why_stopped(self, trial):
        return "PBT"

    def state(self):
        return {"pbt": self.pbt.state(), "queue": self.queue, "decided": sorted(self.decided), "live": sorted(self.live)}


def make(cfg, max_steps, mode, space, seed, state=None):
    kind = cfg.get("kind", "asha")
    cls = {"asha": AshaScheduler, "hyperband": HyperBandScheduler, "median": MedianScheduler, "pbt": PbtScheduler}
    if kind not in cls:
        raise ValueError(f"scheduler.kind: expected one of {', '.join(KINDS)}, got {kind!r}")
    return cls[kind](cfg, max_steps, mode, space, seed, state)
