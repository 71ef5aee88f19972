"""HyperBand as brackets of ASHA (Li et al. 2017; the asynchronous form of Li et al. 2020), and
the median stopping rule (Golovin et al. 2017, Google Vizier).

HyperBand: with s_max = floor(log_eta(max_steps / min_steps)), bracket s (0 .. s_max) is an ASHA
whose first rung is min_steps * eta^s: bracket 0 stops early and often, the last bracket runs
every trial to max_steps, hedging against a metric that is misleading early on. New trials are
dealt to the brackets in turn.

Median stopping: a trial is stopped at step t (after `grace_steps`, once `min_trials` others have
reached t) when its best metric so far is worse than the median of the other trials' running
means up to t.
"""
import math
import statistics

from .asha import Asha


class HyperBand:
    def __init__(self, min_steps, max_steps, eta=3, mode="min"):
        s_max = int(math.floor(math.log(max_steps / min_steps, eta) + 1e-9))
        self.brackets = [Asha(min_steps * eta ** s, max_steps, eta, mode) for s in range(s_max + 1)]
        self.bracket_of = {}  # trial -> bracket index
        self.started = 0

    def place(self, trial):
        """The bracket a new trial joins (round robin)."""
        b = self.started % len(self.brackets)
        self.bracket_of[trial] = b
        self.started += 1
        return b

    def rungs(self, trial):
        return self.brackets[self.bracket_of[trial]].rungs

    def record(self, trial, rung, metric):
        self.brackets[self.bracket_of[trial]].record(trial, rung, metric)

    def next_job(self, can_start_new=True, drained=False):
        for bracket in self.brackets:
            job = bracket.next_job(can_start_new=False, drained=drained and not can_start_new)
            if job:
                return job
        return ("new", None, 0) if can_start_new else None


def median_stop(trial, step, history, grace_steps=0, min_trials=3, mode="min"):
    """Whether `trial` should stop at `step`. history: trial -> list of (step, metric)."""
    if step < grace_steps:
        return False
    sign = 1.0 if mode == "min" else -1.0
    mine = [sign * m for s, m in history.get(trial, []) if s <= step and math.isfinite(m)]
    if not mine:
        return False
    means = []
    for other, points in history.items():
        if other == trial:
            continue
        upto = [sign * m for s, m in points if s <= step and math.isfinite(m)]
        if points and max(s for s, _ in points) >= step and upto:
            means.append(sum(upto) / len(upto))
    if len(means) < min_trials:
        return False
    return min(mine) > statistics.median(means)
