"""The sweep controller: trials of one recipe, trained in segments up to the steps the scheduler
chooses, paused, promoted, stopped or (PBT) restarted from another trial's checkpoint; its whole
state in SWEEP_DIR/state.json, rewritten atomically after every event, so a killed controller
restarts where it was without rerunning finished work.

A trial trains in SWEEP_DIR/trial_<i>/: log.dir run/ (metrics.jsonl, run.json), checkpoints in
run/checkpoints/ (a PBT trial that copied another's checkpoint goes on in its own ckpt_g<step>/,
its earlier checkpoints kept). A segment is one `loom train` with train.stop_at_step = its
target: loom saves a checkpoint and ends there, and the next segment resumes from it. The
decision metric is the last value of `metric` in the trial's metrics.jsonl (val_loss by default:
a run stopped at train.stop_at_step evaluates there).
"""
import filecmp
import json
import math
import os
import shutil
import signal
import time

from . import schedulers

STATE = "state.json"


def write_json_atomically(path, obj):
    tmp = f"{path}.tmp.{os.getpid()}"
    with open(tmp, "w") as f:
        json.dump(obj, f, indent=1)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


# Metrics a run logs only at its evaluations (log.eval_every): val_loss, and log.choices' accuracy.
EVALUATED = ("val_loss", "choice_acc", "choice_acc_norm")

class MetricTail:
    """The [(steps, value)] history of `key` in one metrics.jsonl, read incrementally: each read()
    parses only the whole lines appended since the last one. The median rule looks at every
    started trial's history once a second, and a long run's file has one row per logged step, so
    rereading every file from the start on each poll would grow without bound. A line without
    its newline yet (being written) is left for the next read. A file replaced (another device or
    inode), cut shorter than what was read, or whose byte before the read offset is no longer a
    newline (rewritten in place, e.g. a directory removed and made again on a reused inode) is
    read again from the start."""

    def __init__(self, path, key):
        self.path, self.key = path, key
        self._restart(None)

    def _restart(self, ident):
        self.ident, self.offset, self.points = ident, 0, []

    def read(self):
        try:
            with open(self.path, "rb") as f:
                st = os.fstat(f.fileno())
                ident = (st.st_dev, st.st_ino)
                if ident != self.ident or st.st_size < self.offset:
                    self._restart(ident)
                elif self.offset:
                    f.seek(self.offset - 1)
                    if f.read(1) != b"\n":
                        self._restart(ident)
                f.seek(self.offset)
                data = f.read()
        except OSError:
            self._restart(None)
            return []
        whole = data.rfind(b"\n") + 1
        for line in data[:whole].splitlines():
            self._take(line)
        self.offset += whole
        return list(self.points)

    def _take(self, line):
        try:
            row = json.loads(line)
        except ValueError:
            return  # a line torn by a killed writer
        if not isinstance(row, dict):
            return
        if "resumed_at_step" in row:  # a session redoing steps: its rows replace the earlier ones
            self.points = [p for p in self.points if p[0] <= row["resumed_at_step"]]
        elif row.get(self.key) is not None:
            self.points.append((row["step"] + 1, float(row[self.key])))


def metric_history(run_dir, key):
    """[(steps, value)] of every metrics.jsonl row holding `key` (steps counted from 1)."""
    return MetricTail(os.path.join(run_dir, "metrics.jsonl"), key).read()


def last_session_status(run_dir):
    try:
        with open(os.path.join(run_dir, "run.json")) as f:
            return json.load(f)["sessions"][-1].get("exit_status")
    except (OSError, ValueError, KeyError, IndexError):
        return None


def link_tree(src, dst):
    """Copies a checkpoint directory by hard links (checkpoints are never modified once written),
    or by copying where links cannot be made; into dst.tmp first, then renamed."""
    tmp = dst + ".tmp"
    shutil.rmtree(tmp, ignore_errors=True)

    def link(s, d):
        try:
            os.link(s, d)
        except OSError:
            shutil.copy2(s, d)
    shutil.copytree(src, tmp, copy_function=link)
    os.replace(tmp, dst)


def numbers_read(x):
    """x with every string that is a YAML 1.2 number made that number: a sweep started before the
    spec was read as YAML 1.2 recorded 1e-4 as the string '1e-4', and is still the same sweep."""
    if isinstance(x, dict):
        return {k: numbers_read(v) for k, v in x.items()}
    if isinstance(x, list):
        return [numbers_read(v) for v in x]
    if isinstance(x, str):
        try:
            return float(x) if x.strip() == x and x.lower() not in ("nan", "inf", "-inf", "+inf", "infinity") else x
        except ValueError:
            return x
    if isinstance(x, bool):
        return x
    if isinstance(x, int):
        return float(x)
    return x


def is_copy_of(dst, src):
    """Whether checkpoint directory dst was copied from src: the same manifest, which holds the
    CRC-32C of every tensor (a hard link or a byte-for-byte copy of it)."""
    a, b = os.path.join(dst, "manifest.json"), os.path.join(src, "manifest.json")
    try:
        return filecmp.cmp(a, b, shallow=False)
    except OSError:
        return False


class Controller:
    """`spec`: recipe, sets (overrides for every trial), metric, mode, max_steps, scheduler (its
    section of the sweep spec), space, seed, trials (list of {key: value})."""

    def __init__(self, out, spec, executor, log=print):
        self.out, self.spec, self.ex, self.log = os.path.abspath(out), spec, executor, log
        self.stop_signal = None
        self._tails = {}  # run dir -> MetricTail of spec["metric"]
        os.makedirs(self.out, exist_ok=True)
        ident = {k: spec[k] for k in ("recipe", "sets", "metric", "mode", "max_steps", "scheduler", "trials")}
        path = os.path.join(self.out, STATE)
        if os.path.exists(path):
            with open(path) as f:
                st = json.load(f)
            if numbers_read(st["spec"]) != numbers_read(json.loads(json.dumps(ident))):
                raise SystemExit(f"sweep: {path} belongs to another sweep (its spec differs); use another --out")
            self.trials = st["trials"]
            self.sched = schedulers.make(spec["scheduler"], spec["max_steps"], spec["mode"], spec["space"],
                                         spec["seed"], st["scheduler"])
            self._reattach()
        else:
            self.sched = schedulers.make(spec["scheduler"], spec["max_steps"], spec["mode"], spec["space"], spec["seed"])
            self.trials = [{"id": i, "params": p, "status": "pending", "steps": 0, "target": None, "metrics": [],
                            "ckpt": "run/checkpoints", "lineage": [], "segments": 0, "handle": None, "stopping": None}
                           for i, p in enumerate(spec["trials"])]
        self.ident = ident
        self.save()

    def _reattach(self):
        """After a restart: a segment still running is waited for; one that reached its target
        meanwhile is recorded; the others run again (each resumes from its last checkpoint)."""
        adopted = 0
        for t in self.trials:
            if t["status"] != "running":
                continue
            if self.ex.adopt(t["id"], t["handle"], self.run_dir(t), self.log_path(t)):
                adopted += 1
                continue
            got = self.history(t)
            if t["stopping"] != "shutdown" and got and got[-1][0] == t["target"]:
                self.finish(t["id"], None)  # its exit status from run.json
            else:
                t["status"], t["stopping"] = "interrupted", None
        rerun = sum(t["status"] == "interrupted" for t in self.trials)
        started = sum(t["status"] != "pending" for t in self.trials)
        self.log(f"sweep: resumed {os.path.join(self.out, STATE)}: {started} trials started, {adopted} segment(s) "
                 f"still running, {rerun} to run again from their checkpoints")

    def save(self):
        write_json_atomically(os.path.join(self.out, STATE),
                              {"spec": self.ident, "trials": self.trials, "scheduler": self.sched.state()})

    def trial_dir(self, t):
        return os.path.join(self.out, f"trial_{t['id']}")

    def run_dir(self, t):
        return os.path.join(self.trial_dir(t), "run")

    def log_path(self, t):
        return os.path.join(self.trial_dir(t), "segments.log")

    def history(self, t):
        """Trial t's metric history so far (see MetricTail)."""
        d = self.run_dir(t)
        if d not in self._tails:
            self._tails[d] = MetricTail(os.path.join(d, "metrics.jsonl"), self.spec["metric"])
        return self._tails[d].read()

    def argv(self, t, target):
        d = self.trial_dir(t)
        sets = list(self.spec.get("sets", []))
        sets += [f"{k}={v}" for k, v in sorted(t["params"].items())]
        if self.spec["metric"] in EVALUATED:
            # Evaluate where decisions are made: the median rule at every eval_every steps, the
            # others at each segment's end (a run ending at train.stop_at_step evaluates there).
            every = getattr(self.sched, "eval_every", self.spec["max_steps"])
            sets.append(f"log.eval_every={every}")
        sets += [f"train.steps={self.spec['max_steps']}", f"log.dir={self.run_dir(t)}",
                 f"checkpoint.dir={os.path.join(d, t['ckpt'])}", "checkpoint.resume=auto",
                 f"train.stop_at_step={target}"]
        out = ["train", self.spec["recipe"]]
        for s in sets:
            out += ["--set", s]
        return out

    def exploit(self, t, donor_id, params):
        """PBT: t continues from the donor's checkpoint at t's step, with `params`."""
        donor = self.trials[donor_id]
        step = t["steps"]
        src = os.path.join(self.trial_dir(donor), donor["ckpt"], f"step_{step:08d}")
        if not os.path.isdir(src):
            raise SystemExit(f"sweep: PBT: trial {donor_id} has no checkpoint at step {step} ({src})")
        # ckpt_g<step>, unless that holds anything but this very copy: a controller killed after
        # a copy but before its state.json recorded it restarts, and its scheduler may pick
        # another donor this time; a trial may also come back to a step it went on from before.
        # Going on in such a directory would resume from other parameters (another donor's, or
        # a later checkpoint) under this donor's name; it is kept as it is, and this copy takes
        # the next free name.
        name, n = f"ckpt_g{step}", 1
        while True:
            dst = os.path.join(self.trial_dir(t), name, f"step_{step:08d}")
            held = set(os.listdir(os.path.dirname(dst))) if os.path.isdir(os.path.dirname(dst)) else set()
            base = os.path.basename(dst)
            # (free: nothing there yet, or only what a copy killed half-way left, which
            # link_tree redoes; or the copy itself, made by a controller killed before it saved)
            if held <= {base + ".tmp"} or (held <= {base, base + ".tmp"} and is_copy_of(dst, src)):
                break
            n += 1
            name = f"ckpt_g{step}.{n}"
        if not os.path.isdir(dst):
            os.makedirs(os.path.dirname(dst), exist_ok=True)
            link_tree(src, dst)
        t["lineage"].append({"step": step, "donor": donor_id, "before": t["params"], "after": params,
                             "checkpoint": os.path.relpath(src, self.out)})
        self.log(f"sweep: PBT at step {step}: trial {t['id']} copies trial {donor_id}'s checkpoint, {t['params']} -> {params}")
        t["params"], t["ckpt"] = params, name

    def start(self, t, target, exploit=None):
        if exploit:
            self.exploit(t, *exploit)
        t["status"], t["target"], t["stopping"] = "running", target, None
        t["segments"] += 1
        os.makedirs(self.trial_dir(t), exist_ok=True)
        # Recorded as running before it starts: a controller killed between the launch and the
        # save would otherwise leave a segment that state.json does not know of, and the restart
        # would launch the trial again into the directory that segment holds (it exits 2). The
        # restart finds such a segment by its run directory or its log (adopt).
        t["handle"] = None
        self.save()
        t["handle"] = self.ex.launch(t["id"], self.argv(t, target), self.log_path(t), self.run_dir(t))
        self.log(f"sweep: trial {t['id']} -> {target} steps {t['params']}")
        self.save()

    def finish(self, tid, rc):
        t = self.trials[tid]
        if rc is None:
            rc = last_session_status(self.run_dir(t))
        got = self.history(t)
        reached = got[-1][0] if got else 0
        if got:
            t["metrics"] = [[s, v] for s, v in got]  # every evaluation so far (the median rule's too)
        if rc == 0 and got and reached == t["target"]:  # the segment got there (even if asked to stop)
            t["steps"] = reached
            t["status"] = self.sched.report(tid, reached, got[-1][1])
        elif t["stopping"] == "shutdown":
            t["status"] = "interrupted"  # the restart resumes it from the checkpoint it just saved
        elif t["stopping"] == "scheduler":
            t["status"], t["why"] = "stopped", self.sched.why_stopped(tid)
            t["steps"] = max(t["steps"], reached)
        elif rc == 75:
            t["status"] = "interrupted"  # a time limit or preemption: run the segment again
        else:
            t["status"], t["why"] = "failed", f"segment to {t['target']} steps exited {rc}" + ("" if got else ", no metric")
            t["steps"] = max(t["steps"], reached)
            self.sched.fail(tid)
        t["stopping"] = None
        shown = t["metrics"][-1][1] if t["metrics"] else "none"
        self.log(f"sweep: trial {tid} at {t['steps']} steps: {self.spec['metric']} {shown} ({t['status']})")
        self.save()

    def watch(self):
        """The median rule: look at the running trials' evaluations as they appear."""
        history = {t["id"]: self.history(t)
                   for t in self.trials if t["status"] != "pending"}
        for tid in list(self.ex.running):
            t = self.trials[tid]
            if t["stopping"] or not history.get(tid):
                continue
            step = history[tid][-1][0]
            if step < t["target"] and self.sched.should_stop(tid, step, history):
                self.log(f"sweep: stopping trial {tid} at step {step}: {self.sched.why_stopped(tid)}")
                t["stopping"] = "scheduler"
                self.ex.stop(tid)
                self.save()

    def _on_signal(self, signum, _frame):
        self.stop_signal = signum

    def shutdown(self, poll_s):
        self.log(f"sweep: signal {self.stop_signal}: stopping {len(self.ex.running)} segment(s) with a final checkpoint")
        for tid in self.ex.running:
            self.trials[tid]["stopping"] = "shutdown"
        self.save()
        self.ex.stop_all()
        while self.ex.running:
            for tid, rc in self.ex.poll().items():
                self.finish(tid, rc)
            time.sleep(poll_s)
        raise SystemExit(f"sweep: stopped by signal {self.stop_signal}; run the same command again to continue")

    def run(self, poll_s=None):
        poll_s = getattr(self.ex, "poll_s", 1.0) if poll_s is None else poll_s
        signal.signal(signal.SIGTERM, self._on_signal)
        signal.signal(signal.SIGINT, self._on_signal)
        while True:
            if self.stop_signal:
                self.shutdown(poll_s)
            for tid, rc in self.ex.poll().items():
                self.finish(tid, rc)
            if self.sched.watches:
                self.watch()
            while self.ex.free() > 0 and not self.stop_signal:
                again = [t for t in self.trials if t["status"] == "interrupted"]
                if again:
                    self.start(again[0], again[0]["target"])
                    continue
                if hasattr(self.sched, "params"):
                    self.sched.params = {t["id"]: t["params"] for t in self.trials}
                pending = [t["id"] for t in self.trials if t["status"] == "pending"]
                job = self.sched.next_job(pending, drained=not pending and not self.ex.running)
                if job is None:
                    break
                tid, target, exploit = job
                self.start(self.trials[tid], target, exploit)
            if not self.ex.running and not self.stop_signal:
                break
            time.sleep(poll_s)
        for t in self.trials:
            if t["status"] == "paused":
                t["status"], t["why"] = "stopped", self.sched.why_stopped(t["id"])
        self.save()
        return self.trials


def best_trial(trials, mode):
    """The trial with the best final metric among those that trained to the end (else any)."""
    def final(t):
        m = t["metrics"][-1][1] if t["metrics"] else math.nan
        return m if math.isfinite(m) else math.inf * (1 if mode == "min" else -1)
    done = [t for t in trials if t["status"] == "done"] or [t for t in trials if t["metrics"]]
    if not done:
        return None
    return (min if mode == "min" else max)(done, key=final)
