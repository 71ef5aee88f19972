"""The sweep controller: trials of one recipe, run in segments between the scheduler's rungs,
stopped early or promoted, its whole state in SWEEP_DIR/state.json (rewritten atomically after
every event, so a killed controller restarts where it was without rerunning finished work).

A trial trains in OUT/trial_<i>/ (log.dir run/, checkpoint.dir ckpt/). A segment is one `loom
train` with train.stop_at_step = the rung's steps: it saves a checkpoint and ends there, and the
next segment (a promotion) resumes from that checkpoint. The decision metric is read from the
trial's metrics.jsonl: the last value of `metric` (val_loss by default: a stopped run evaluates
at its end).

Executors: local (mpirun processes on this machine, `parallel` at a time). Slurm: not yet.
"""
import json
import os
import shlex
import subprocess
import time

from .asha import Asha

STATE = "state.json"


def write_json_atomically(path, obj):
    tmp = f"{path}.tmp.{os.getpid()}"
    with open(tmp, "w") as f:
        json.dump(obj, f, indent=1)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def last_metric(run_dir, key):
    """(step, value) of the last row of metrics.jsonl holding `key`, or None."""
    path = os.path.join(run_dir, "metrics.jsonl")
    found = None
    try:
        with open(path) as f:
            for line in f:
                row = json.loads(line)
                if key in row:
                    found = (row["step"] + 1, row[key])  # metrics count steps from 0
    except (OSError, ValueError):
        return None
    return found


class LocalExecutor:
    def __init__(self, loom, mpirun="mpirun", ranks=1, parallel=1, env=None):
        self.loom, self.mpirun, self.ranks, self.parallel = loom, mpirun, ranks, parallel
        self.env = dict(os.environ, **(env or {}))
        self.running = {}  # trial -> Popen

    def free(self):
        return self.parallel - len(self.running)

    def launch(self, trial, argv, log_path):
        cmd = [self.mpirun, "-np", str(self.ranks), "--bind-to", "none", self.loom] + argv
        log = open(log_path, "a")
        log.write("$ " + " ".join(shlex.quote(c) for c in cmd) + "\n")
        log.flush()
        self.running[trial] = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=self.env)
        log.close()

    def poll(self):
        """{trial: exit status} of the segments that ended."""
        done = {t: p.poll() for t, p in self.running.items() if p.poll() is not None}
        for t in done:
            del self.running[t]
        return done

    def stop_all(self):
        for p in self.running.values():
            p.terminate()


class Controller:
    """`spec`: recipe, sets (recipe overrides for every trial), metric, mode, min_steps, eta,
    max_steps, and the trials (list of {key: value})."""

    def __init__(self, out, spec, executor, log=print):
        self.out, self.spec, self.ex, self.log = out, spec, executor, log
        os.makedirs(out, exist_ok=True)
        path = os.path.join(out, STATE)
        if os.path.exists(path):
            with open(path) as f:
                st = json.load(f)
            if st["trials_spec"] != spec["trials"]:
                raise SystemExit(f"sweep: {path} belongs to another sweep (its trials differ); use another directory")
            self.trials = st["trials"]
            self.asha = Asha.from_state(st["asha"])
            # Segments that were running when the controller died: one that reached its rung
            # meanwhile (its metric is there) is recorded; the others run again (loom resumes
            # each from its own last checkpoint).
            self.requeue = []
            for t in self.trials:
                if t["status"] != "running":
                    continue
                got = last_metric(os.path.join(self.trial_dir(t), "run"), spec["metric"])
                if got and got[0] == self.asha.rungs[t["target_rung"]]:
                    self.finish(t["id"], 0)
                else:
                    self.requeue.append(t["id"])
            self.log(f"sweep: resumed {path}: {sum(t['status'] != 'pending' for t in self.trials)} trials started, "
                     f"{len(self.requeue)} segment(s) to run again")
        else:
            self.asha = Asha(spec["min_steps"], spec["max_steps"], spec["eta"], spec["mode"])
            self.trials = [{"id": i, "params": p, "status": "pending", "rung": None, "target_rung": None,
                            "steps": 0, "metrics": []} for i, p in enumerate(spec["trials"])]
            self.requeue = []
        self.save()

    def save(self):
        write_json_atomically(os.path.join(self.out, STATE),
                              {"trials_spec": self.spec["trials"], "trials": self.trials, "asha": self.asha.state()})

    def trial_dir(self, t):
        return os.path.join(self.out, f"trial_{t['id']}")

    def argv(self, t, rung):
        d = self.trial_dir(t)
        sets = list(self.spec.get("sets", []))
        sets += [f"{k}={v}" for k, v in sorted(t["params"].items())]
        # A segment's end evaluates (log.eval_every: every N steps and at the end of a run).
        if self.spec["metric"] == "val_loss" and not any(s.startswith("log.eval_every=") for s in sets):
            sets.append(f"log.eval_every={self.spec['max_steps']}")
        sets += [f"train.steps={self.spec['max_steps']}", f"log.dir={d}/run", f"checkpoint.dir={d}/ckpt",
                 "checkpoint.resume=auto", f"train.stop_at_step={self.asha.rungs[rung]}"]
        out = ["train", self.spec["recipe"]]
        for s in sets:
            out += ["--set", s]
        return out

    def start(self, t, rung):
        t["status"], t["target_rung"] = "running", rung
        os.makedirs(self.trial_dir(t), exist_ok=True)
        self.ex.launch(t["id"], self.argv(t, rung), os.path.join(self.trial_dir(t), "segments.log"))
        self.log(f"sweep: trial {t['id']} -> {self.asha.rungs[rung]} steps {t['params']}")
        self.save()

    def finish(self, tid, rc):
        t = self.trials[tid]
        rung = t["target_rung"]
        got = last_metric(os.path.join(self.trial_dir(t), "run"), self.spec["metric"])
        if rc != 0 or got is None or got[0] != self.asha.rungs[rung]:
            t["status"] = "failed"
            t["why"] = f"segment to {self.asha.rungs[rung]} steps exited {rc}" + ("" if got else ", no metric")
            self.asha.record(tid, rung, float("nan"))
        else:
            t["rung"], t["steps"] = rung, got[0]
            t["metrics"].append([got[0], got[1]])
            self.asha.record(tid, rung, got[1])
            t["status"] = "done" if rung == len(self.asha.rungs) - 1 else "paused"
        self.log(f"sweep: trial {tid} at {t['steps']} steps: {self.spec['metric']} "
                 f"{t['metrics'][-1][1] if t['metrics'] else 'none'} ({t['status']})")
        self.save()

    def run(self, poll_s=1.0):
        # SIGTERM/SIGINT end the running segments too (each saves nothing more than its last
        # checkpoint); a restart picks the sweep up from state.json.
        import signal

        def stop(signum, _frame):
            self.ex.stop_all()
            raise SystemExit(f"sweep: stopped by signal {signum}; run the same command again to continue")
        signal.signal(signal.SIGTERM, stop)
        signal.signal(signal.SIGINT, stop)
        for tid in self.requeue:
            self.start(self.trials[tid], self.trials[tid]["target_rung"])
        self.requeue = []
        while True:
            for tid, rc in self.ex.poll().items():
                self.finish(tid, rc)
            while self.ex.free() > 0:
                pending = [t for t in self.trials if t["status"] == "pending"]
                job = self.asha.next_job(can_start_new=bool(pending))
                if job is None:
                    break
                kind, tid, rung = job
                self.start(pending[0] if kind == "new" else self.trials[tid], rung)
            if not self.ex.running:
                break
            time.sleep(poll_s)
        for t in self.trials:
            if t["status"] == "paused":
                t["status"] = "stopped"
                t["why"] = f"ASHA: not in the best 1/{self.asha.eta} at {t['steps']} steps"
        self.save()
        return self.trials
