"""The sweep controller's bookkeeping with a stand-in for `loom train` (the e2e tests run the
real one): an executor whose segments write metrics.jsonl and run.json the way loom does, a
few steps per poll, with a loss that depends on the learning rate. Checks the median rule
stopping a running trial through the executor, HyperBand finishing every bracket, PBT's
generations, and a restart that re-attaches a running segment and reruns an interrupted one;
and the incremental metrics.jsonl reader against a whole reread."""
import json
import math
import os
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "scripts"))
from sweeplib.controller import Controller, MetricTail, metric_history  # noqa: E402


def loss(lr, step):
    return 2.0 + abs(math.log10(lr) + 3.0) + 3.0 / (1.0 + step / 10.0)


class FakeLoom:
    """Segments advance `per_poll` steps per poll(); stop() ends one with exit 75 at its step."""

    def __init__(self, parallel=2, per_poll=10):
        self.parallel, self.per_poll = parallel, per_poll
        self.running, self.launched, self.stopped = {}, [], []

    def free(self):
        return self.parallel - len(self.running)

    def launch(self, trial, argv, log_path, run_dir):
        sets = dict(a.split("=", 1) for a in argv[3::2])
        os.makedirs(run_dir, exist_ok=True)
        start = 0
        if os.path.exists(f"{run_dir}/run.json"):
            with open(f"{run_dir}/run.json") as f:
                start = json.load(f)["sessions"][-1]["end_step"]
        seg = {"dir": run_dir, "lr": float(sets["optim.lr"]), "step": start, "start": start,
               "target": int(sets["train.stop_at_step"]), "eval": int(sets["log.eval_every"]), "stop": False}
        self.running[trial] = seg
        self.launched.append((trial, start, seg["target"]))
        return {"fake": trial}

    def adopt(self, trial, handle, run_dir=None, log_path=None):
        return False

    def _end(self, seg, rc):
        path = f"{seg['dir']}/run.json"
        runs = {"sessions": []}
        if os.path.exists(path):
            with open(path) as f:
                runs = json.load(f)
        runs["sessions"].append({"start_step": seg["start"], "end_step": seg["step"], "exit_status": rc})
        with open(path, "w") as f:
            json.dump(runs, f)

    def poll(self):
        done = {}
        for t, seg in list(self.running.items()):
            if seg["stop"]:
                self._end(seg, 75)
                done[t] = 75
                continue
            with open(f"{seg['dir']}/metrics.jsonl", "a") as f:
                for _ in range(self.per_poll):
                    if seg["step"] == seg["target"]:
                        break
                    s = seg["step"]
                    row = {"step": s, "loss": loss(seg["lr"], s)}
                    if (s + 1) % seg["eval"] == 0 or s + 1 == seg["target"]:
                        row["val_loss"] = loss(seg["lr"], s + 1)
                        row["choice_acc_norm"] = 1.0 / row["val_loss"]  # log.choices: higher is better
                    f.write(json.dumps(row) + "\n")
                    seg["step"] += 1
            if seg["step"] == seg["target"]:
                self._end(seg, 0)
                done[t] = 0
        for t in done:
            del self.running[t]
        return done

    def stop(self, trial):
        self.stopped.append(trial)
        self.running[trial]["stop"] = True

    def stop_all(self):
        for t in list(self.running):
            self.stop(t)


def spec(kind, trials, max_steps, **sched):
    return {"recipe": "r.yaml", "sets": [], "metric": "val_loss", "mode": "min", "max_steps": max_steps,
            "scheduler": dict(kind=kind, **sched), "space": {"optim.lr": {"loguniform": [1e-5, 1e-1]}},
            "seed": 0, "trials": [{"optim.lr": lr} for lr in trials]}


LRS = [1e-1, 1e-3, 1e-5, 3e-3, 3e-4, 1e-2, 1e-4, 2e-3]  # best: 1e-3, then 2e-3, 3e-4, 3e-3


class ControllerTest(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.mkdtemp()

    def run_sweep(self, s, ex):
        return Controller(self.dir, s, ex, log=lambda *_: None).run(poll_s=0)

    def test_median_rule_stops_a_running_trial(self):
        ex = FakeLoom(parallel=8, per_poll=10)
        out = self.run_sweep(spec("median", LRS, 100, eval_every=10, grace_steps=20, min_trials=3), ex)
        stopped = sorted(t["id"] for t in out if t["status"] == "stopped")
        self.assertEqual(sorted(ex.stopped), stopped)
        # The four farthest from 1e-3 are worse than the median of the running means at step 20.
        self.assertEqual(stopped, [0, 2, 5, 6])
        for t in out:
            if t["status"] == "stopped":
                self.assertLess(t["steps"], 100)
                self.assertTrue(t["why"].startswith("median rule at step"))
            else:
                self.assertEqual((t["status"], t["steps"]), ("done", 100))

    def test_hyperband_runs_every_bracket(self):
        ex = FakeLoom(parallel=2)
        out = self.run_sweep(spec("hyperband", LRS, 90, min_steps=10, eta=3), ex)
        done = [t for t in out if t["status"] == "done"]
        self.assertTrue(done)
        self.assertEqual(min(done, key=lambda t: t["metrics"][-1][1])["params"]["optim.lr"], 1e-3)
        # Every segment resumed where the trial's last one ended: none started over.
        for trial, start, target in ex.launched:
            self.assertLess(start, target)
        starts = {}
        for trial, start, target in ex.launched:
            self.assertEqual(start, starts.get(trial, 0))
            starts[trial] = target

    def test_choice_accuracy_maximised_and_evaluated_at_decisions(self):
        # log.choices' accuracy, as val_loss, is only logged at evaluations: the controller must set
        # log.eval_every (FakeLoom reads it) and, with mode max, keep the most accurate trial.
        ex = FakeLoom(parallel=4)
        s = spec("asha", LRS, 90, min_steps=10, eta=3)
        s.update(metric="choice_acc_norm", mode="max")
        out = self.run_sweep(s, ex)
        done = [t for t in out if t["status"] == "done"]
        self.assertTrue(done)
        self.assertEqual(max(done, key=lambda t: t["metrics"][-1][1])["params"]["optim.lr"], 1e-3)

    def test_pbt_generations(self):
        ex = FakeLoom(parallel=2)
        s = spec("pbt", LRS[:4], 30, interval=10, quantile=0.25)
        os.makedirs(self.dir, exist_ok=True)
        # The controller copies the donor's checkpoint directory: give each segment one.
        real_launch = ex.launch

        def launch(trial, argv, log_path, run_dir):
            h = real_launch(trial, argv, log_path, run_dir)
            seg = ex.running[trial]
            ck = dict(a.split("=", 1) for a in argv[3::2])["checkpoint.dir"]
            os.makedirs(f"{ck}/step_{seg['target']:08d}", exist_ok=True)
            return h
        ex.launch = launch
        out = self.run_sweep(s, ex)
        copies = [(t["id"], e["step"], e["donor"]) for t in out for e in t["lineage"]]
        self.assertEqual([c[1] for c in sorted(copies, key=lambda c: c[1])], [10, 20])
        self.assertTrue(all(t["status"] == "done" and t["steps"] == 30 for t in out))
        for tid, step, donor in copies:
            self.assertTrue(os.path.isdir(f"{self.dir}/trial_{tid}/ckpt_g{step}/step_{step:08d}"))

    def test_pbt_copy_never_goes_on_from_another_checkpoint(self):
        # Donors 1 and 2 each hold a checkpoint at step 10 (a manifest each: the CRCs differ).
        c = Controller(self.dir, spec("pbt", LRS[:3], 30, interval=10, quantile=0.34), FakeLoom(), log=lambda *_: None)
        for donor in (1, 2):
            d = f"{self.dir}/trial_{donor}/run/checkpoints/step_00000010"
            os.makedirs(d)
            with open(f"{d}/manifest.json", "w") as f:
                f.write(f'{{"donor": {donor}}}')
        manifest = lambda ck: open(f"{self.dir}/trial_0/{ck}/step_00000010/manifest.json").read()
        t = c.trials[0]
        t["steps"] = 10
        # A controller killed after copying donor 1's checkpoint, before state.json said so...
        c.exploit(t, 1, {"optim.lr": 1e-3})
        self.assertEqual((t["ckpt"], manifest("ckpt_g10")), ("ckpt_g10", '{"donor": 1}'))
        # ...restarts, and this time its scheduler picks donor 2: a copy of its own, the first kept.
        t["ckpt"] = "run/checkpoints"
        c.exploit(t, 2, {"optim.lr": 2e-3})
        self.assertEqual((t["ckpt"], manifest("ckpt_g10.2")), ("ckpt_g10.2", '{"donor": 2}'))
        self.assertEqual(manifest("ckpt_g10"), '{"donor": 1}')
        # The same donor again finds its copy and makes none.
        c.exploit(t, 2, {"optim.lr": 2e-3})
        self.assertEqual(t["ckpt"], "ckpt_g10.2")
        self.assertFalse(os.path.exists(f"{self.dir}/trial_0/ckpt_g10.3"))
        # A copy that was trained on (a later checkpoint beside it) is not gone on from either.
        os.makedirs(f"{self.dir}/trial_0/ckpt_g10.2/step_00000015")
        c.exploit(t, 2, {"optim.lr": 2e-3})
        self.assertEqual((t["ckpt"], manifest("ckpt_g10.3")), ("ckpt_g10.3", '{"donor": 2}'))
        # A copy killed half-way (only its .tmp) is redone in place.
        os.makedirs(f"{self.dir}/trial_2/ckpt_g10/step_00000010.tmp")
        c.trials[2]["steps"] = 10
        c.exploit(c.trials[2], 1, {"optim.lr": 1e-3})
        self.assertEqual(c.trials[2]["ckpt"], "ckpt_g10")
        self.assertEqual(os.listdir(f"{self.dir}/trial_2/ckpt_g10"), ["step_00000010"])

    def test_spec_recorded_with_numbers_as_strings_is_the_same_sweep(self):
        # Before the spec was read as YAML 1.2, 1e-4 was recorded as the string '1e-4'.
        old = spec("asha", ["1e-4", "1e-3"], 30, min_steps=10)
        Controller(self.dir, old, FakeLoom(), log=lambda *_: None)
        Controller(self.dir, spec("asha", [1e-4, 1e-3], 30, min_steps=10), FakeLoom(), log=lambda *_: None)
        with self.assertRaises(SystemExit):  # another sweep still is
            Controller(self.dir, spec("asha", [1e-4, 2e-3], 30, min_steps=10), FakeLoom(), log=lambda *_: None)

    def test_restart_reruns_interrupted_and_keeps_finished(self):
        s = spec("asha", LRS, 90, min_steps=10, eta=3)
        ex = FakeLoom(parallel=2)
        c = Controller(self.dir, s, ex, log=lambda *_: None)
        # Run until 3 segments ended, then "die" with two running (interrupted mid-segment).
        while sum(t["status"] == "paused" for t in c.trials) < 3:
            for tid, rc in ex.poll().items():
                c.finish(tid, rc)
            while ex.free() > 0:
                pending = [t["id"] for t in c.trials if t["status"] == "pending"]
                tid, target, _ = c.sched.next_job(pending)
                c.start(c.trials[tid], target)
        running = sorted(ex.running)
        for t in running:  # their processes died with the machine: loom saved nothing past the rung
            seg = ex.running[t]
            seg["step"] = seg["start"]
        ex2 = FakeLoom(parallel=2)
        out = Controller(self.dir, s, ex2, log=lambda *_: None).run(poll_s=0)
        self.assertEqual(sorted(t for t, _, _ in ex2.launched[:2]), running)  # rerun first
        finished_before = {t for t, start, target in ex.launched if t not in running}
        for t, start, target in ex2.launched:
            self.assertFalse(t in finished_before and start == 0, f"trial {t} was trained again from 0")
        self.assertTrue(any(t["status"] == "done" for t in out))


class MetricTailTest(unittest.TestCase):
    """MetricTail gives what a whole reread gives, at every stage of a file's life, reading only
    what was appended."""

    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory()
        self.path = os.path.join(self.tmp.name, "metrics.jsonl")
        self.tail = MetricTail(self.path, "val_loss")

    def tearDown(self):
        self.tmp.cleanup()

    def append(self, text):
        with open(self.path, "a") as f:
            f.write(text)

    def same_as_reread(self):
        got = self.tail.read()
        self.assertEqual(got, metric_history(self.tmp.name, "val_loss"))
        return got

    def row(self, step, **kw):
        return json.dumps({"step": step, "loss": 3.0, **kw}) + "\n"

    def test_appends_partial_lines_resumes_and_replacement(self):
        self.assertEqual(self.same_as_reread(), [])  # no file yet
        self.append(self.row(0) + self.row(9, val_loss=2.5))
        self.assertEqual(self.same_as_reread(), [(10, 2.5)])
        # A row being written: not taken until its newline arrives, and not lost then.
        whole = self.row(19, val_loss=2.25)
        self.append(whole[:10])
        self.assertEqual(self.same_as_reread(), [(10, 2.5)])
        self.assertEqual(self.tail.offset, os.path.getsize(self.path) - 10)
        self.append(whole[10:])
        self.assertEqual(self.same_as_reread(), [(10, 2.5), (20, 2.25)])
        # Only what was appended is parsed: a byte changed in place before the offset is not seen.
        with open(self.path, "r+") as f:
            f.write("X")
        self.assertEqual(self.tail.read(), [(10, 2.5), (20, 2.25)])
        # A torn line (a killed writer) followed by a resumed session's rows.
        self.append('{"step": 25, "val_l' + "\n" + json.dumps({"resumed_at_step": 10}) + "\n" +
                    self.row(19, val_loss=2.0) + self.row(29, val_loss=1.75, ignored=None))
        self.assertEqual(self.tail.read(), [(10, 2.5), (20, 2.0), (30, 1.75)])
        # Cut shorter than what was read: read again from the start.
        with open(self.path, "w") as f:
            f.write(self.row(9, val_loss=4.0))
        self.assertEqual(self.same_as_reread(), [(10, 4.0)])
        # Replaced by another file (another inode) at least as long: read again from the start.
        other = self.path + ".new"
        with open(other, "w") as f:
            f.write(self.row(9, val_loss=5.0) + self.row(19, val_loss=4.5) + self.row(29, val_loss=None))
        os.replace(other, self.path)
        self.assertEqual(self.same_as_reread(), [(10, 5.0), (20, 4.5)])
        # Rewritten in place (the same inode), longer, with no newline just before the old offset.
        with open(self.path, "r+") as f:
            f.write(json.dumps({"step": 9, "val_loss": 7.0, "pad": "x" * self.tail.offset}) + "\n")
        self.assertEqual(self.same_as_reread(), [(10, 7.0)])
        os.remove(self.path)
        self.assertEqual(self.same_as_reread(), [])


def wait_for_exec(pid, argv0, timeout_s=30):
    """Until process pid runs as argv0 (bash has exec'd; its own arguments, `bash -c "exec -a
    argv0 ..."`, name argv0 too, and while the exec is under way /proc shows no arguments at all):
    a loaded machine can take well over a second to get there."""
    import time
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            if f.read().startswith(argv0 + b"\0"):
                return
        time.sleep(0.02)
    raise AssertionError(f"process {pid} did not exec into {argv0!r} within {timeout_s} s")


class AdoptByLockTest(unittest.TestCase):
    """A segment launched just before the controller was killed has no saved handle: the local
    executor finds it by the processes naming its run directory, or by the loom process holding
    its run directory's lock, and waits for it."""

    def test_lock_holder_is_adopted_and_waited_for(self):
        import socket
        import subprocess
        from sweeplib.executors import LocalExecutor, lock_holder
        with tempfile.TemporaryDirectory() as d:
            p = subprocess.Popen(["bash", "-c", "exec -a fakeloom sleep 30"])
            try:
                with open(os.path.join(d, ".loom.lock"), "w") as f:
                    f.write(f"host: {socket.gethostname()}\npid: {p.pid}\nstarted: now\n")
                wait_for_exec(p.pid, b"fakeloom")
                self.assertEqual(lock_holder(os.path.join(d, ".loom.lock")), p.pid)
                ex = LocalExecutor("loom")
                self.assertTrue(ex.adopt(3, None, d))
                self.assertEqual(ex.poll(), {})
                p.kill()
                p.wait()
                self.assertEqual(ex.poll(), {3: None})  # ended; its status comes from run.json
            finally:
                if p.poll() is None:
                    p.kill()
            # A lock of another host, or of a pid that is not loom's, adopts nothing.
            with open(os.path.join(d, ".loom.lock"), "w") as f:
                f.write(f"host: elsewhere\npid: {os.getpid()}\n")
            self.assertIsNone(lock_holder(os.path.join(d, ".loom.lock")))
            self.assertFalse(LocalExecutor("loom").adopt(4, None, d))

    def test_segment_not_yet_holding_the_lock_is_adopted(self):
        """mpirun has started but loom has not taken the lock yet (the window that had a restarted
        sweep launch trial 4 a second time, which then exited 2 on the held lock): adopted by
        its arguments, the outermost process (mpirun's stand-in) first."""
        import subprocess
        from sweeplib.executors import LocalExecutor, segment_processes
        with tempfile.TemporaryDirectory() as d:
            run = os.path.join(d, "run")
            arg = f"log.dir={run}"
            # A parent (mpirun's stand-in) and its child (a rank's), both naming the run directory.
            # (Popen returns once the parent has exec'd; the loop below waits for the child.)
            rank = "import time; time.sleep(30)"
            launcher = f"import subprocess, sys; subprocess.run([sys.executable, '-c', {rank!r}] + sys.argv[1:])"
            p = subprocess.Popen([sys.executable, "-c", launcher, "--set", arg])
            try:
                import time
                deadline = time.monotonic() + 30
                while len(segment_processes(run)) < 2 and time.monotonic() < deadline:
                    time.sleep(0.02)
                pids = segment_processes(run)
                self.assertEqual(len(pids), 2, pids)
                self.assertEqual(pids[0], p.pid)  # the parent first
                # Another directory whose name starts the same is not this one.
                self.assertEqual(segment_processes(run[:-1]), [])
                ex = LocalExecutor("mpirun")
                self.assertTrue(ex.adopt(5, None, run))
                self.assertEqual(ex.running[5], p.pid)
                self.assertEqual(ex.poll(), {})
            finally:
                subprocess.run(["pkill", "-f", arg])
                p.wait()
            self.assertEqual(ex.poll(), {5: None})
            # The rank's stand-in is not our child: it ends when it handles pkill's SIGTERM.
            deadline = time.monotonic() + 30
            while segment_processes(run) and time.monotonic() < deadline:
                time.sleep(0.02)
            self.assertFalse(LocalExecutor("mpirun").adopt(6, None, run))


if __name__ == "__main__":
    unittest.main()
