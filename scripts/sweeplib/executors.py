"""Where a trial's segments run: as mpirun processes on this machine (local), or as Slurm jobs
(slurm, one batch job per segment through slurm/sweep_trial.sbatch, so a paused trial holds no
allocation while it waits for a promotion).

An executor launches a segment (`loom train ...` arguments) and returns a handle the controller
keeps in state.json; adopt() re-attaches a handle after the controller restarted, so a segment
that outlived the controller is waited for rather than run twice (one launched just before the
controller was killed, whose handle was never saved, is found by its run directory or log). poll() returns the segments
that ended with their exit status (None when it cannot be known: the controller then reads the
trial's run.json). stop() asks one segment to stop gracefully: loom saves a checkpoint at the
end of the step and exits 75 (SIGUSR1 to mpirun, which forwards it; under Slurm `scancel
--batch --signal=USR1`, which slurm/loom_job.sh forwards).
"""
import os
import shlex
import signal
import socket
import subprocess


def lock_holder(path):
    """The pid of the live loom process of this host that holds a Loom lock file (engine/util/dir_lock.hpp:
    "host: H" and "pid: P" lines), or None."""
    try:
        with open(path) as f:
            fields = dict(line.split(":", 1) for line in f if ":" in line)
        host, pid = fields.get("host", "").strip(), int(fields.get("pid", "").strip())
        if host != socket.gethostname():
            return None
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return pid if b"loom" in f.read() else None
    except (OSError, ValueError):
        return None


def segment_processes(run_dir):
    """The pids of this host's processes whose arguments name run_dir as loom's log.dir (the
    controller passes `--set log.dir=RUN_DIR` to every segment, so mpirun and its loom ranks have
    it from their exec on), outermost first (a process whose parent is also one comes later)."""
    want = f"log.dir={run_dir}".encode()
    found = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/cmdline", "rb") as f:
                if want not in f.read().split(b"\0"):
                    continue
            with open(f"/proc/{name}/stat", "rb") as f:
                ppid = int(f.read().rsplit(b")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            continue  # ended meanwhile, or not ours to read
        found[int(name)] = ppid
    return sorted(found, key=lambda pid: (found[pid] in found, pid))


class LocalExecutor:
    poll_s = 0.2  # polling a child process is free

    def __init__(self, loom, ranks=1, parallel=1, env=None, mpirun="mpirun"):
        self.loom, self.mpirun, self.ranks, self.parallel = loom, mpirun, ranks, parallel
        self.env = dict(os.environ, **(env or {}))
        self.running = {}  # trial -> Popen, or pid (adopted)

    def free(self):
        return self.parallel - len(self.running)

    def launch(self, trial, argv, log_path, run_dir):
        cmd = [self.mpirun, "-np", str(self.ranks), "--bind-to", "none", self.loom] + argv
        with open(log_path, "a") as log:
            log.write("$ " + " ".join(shlex.quote(c) for c in cmd) + "\n")
            log.flush()
            # Its own session: a Ctrl-C at the controller's terminal reaches the controller, which
            # stops the segments gracefully, and a killed controller leaves them running.
            p = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=self.env, start_new_session=True)
        self.running[trial] = p
        return {"pid": p.pid}

    def adopt(self, trial, handle, run_dir=None, log_path=None):
        """True if the segment is still running (then it is tracked like one launched here): its
        mpirun by the handle's pid; or else, for a segment launched just before the controller was
        killed, whose handle was never saved, the processes whose arguments name its run directory
        (mpirun exists from the moment launch() returns, while loom takes the directory's lock
        only once its ranks have started: a restart in between must not launch it again), or the
        loom process holding the run directory's lock."""
        pid = (handle or {}).get("pid")
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                alive = os.path.basename(self.mpirun).encode() in f.read()
        except (OSError, TypeError):
            alive = False
        if not alive and run_dir:
            pids = segment_processes(run_dir)
            pid = pids[0] if pids else lock_holder(os.path.join(run_dir, ".loom.lock"))
            alive = pid is not None
        if alive:
            self.running[trial] = pid
        return alive

    def poll(self):
        done = {}
        for t, p in list(self.running.items()):
            if isinstance(p, int):  # adopted: not our child, so no exit status
                try:
                    os.kill(p, 0)
                except ProcessLookupError:
                    done[t] = None
            elif p.poll() is not None:
                done[t] = p.returncode
        for t in done:
            del self.running[t]
        return done

    def stop(self, trial):
        p = self.running.get(trial)
        if p is not None:
            try:
                os.kill(p if isinstance(p, int) else p.pid, signal.SIGUSR1)
            except ProcessLookupError:
                pass

    def stop_all(self):
        for t in list(self.running):
            self.stop(t)


class SlurmExecutor:
    """sbatch_args: extra sbatch arguments for every segment (resources, partition, time);
    env: variables for slurm/loom_job.sh (LAUNCHER, OMP_NUM_THREADS, ...)."""

    poll_s = 1.0  # each poll is a squeue call to slurmctld

    ENDED = ("COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "PREEMPTED", "BOOT_FAIL", "DEADLINE",
             "OUT_OF_MEMORY", "SPECIAL_EXIT")

    def __init__(self, loom, src, parallel=1, sbatch_args="", env=None, name="loom-sweep"):
        self.loom, self.src, self.parallel, self.name = os.path.abspath(loom), src, parallel, name
        self.sbatch_args = shlex.split(sbatch_args) if isinstance(sbatch_args, str) else list(sbatch_args)
        self.env = {k: str(v) for k, v in (env or {}).items()}
        self.running = {}  # trial -> job id

    def free(self):
        return self.parallel - len(self.running)

    def launch(self, trial, argv, log_path, run_dir):
        # argv is `train RECIPE --set k=v ...`: loom_job.sh takes the recipe and the overrides.
        # loom_job.sh splits OVERRIDES on whitespace, so no argument may hold any.
        assert argv[0] == "train"
        spaced = [a for a in argv[2:] if not a or any(c.isspace() for c in a)]
        if spaced:
            raise RuntimeError(f"trial {trial}: the Slurm executor cannot pass an override holding spaces: {spaced[0]!r}")
        env = dict(os.environ, **self.env)
        env.update(RECIPE=os.path.abspath(argv[1]), OVERRIDES=" ".join(argv[2:]), RUN_DIR=run_dir,
                   LOOM=self.loom, REQUEUE="0")
        cmd = ["sbatch", "--parsable", f"--job-name={self.name}-{trial}", f"--output={log_path}",
               "--open-mode=append"] + self.sbatch_args + [os.path.join(self.src, "slurm", "sweep_trial.sbatch")]
        with open(log_path, "a") as log:
            log.write("$ " + " ".join(shlex.quote(c) for c in cmd) + f"  (OVERRIDES={env['OVERRIDES']})\n")
        r = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=self.src)
        if r.returncode != 0:
            raise RuntimeError(f"sbatch failed ({r.returncode}) for trial {trial}: {r.stderr.strip()}")
        job = r.stdout.strip().split(";")[0]
        self.running[trial] = job
        return {"job": job}

    def _states(self):
        r = subprocess.run(["squeue", "-h", "-t", "all", "-o", "%i %T"], capture_output=True, text=True)
        if r.returncode != 0:
            raise RuntimeError(f"squeue failed ({r.returncode}): {r.stderr.strip()}")
        return dict(line.split() for line in r.stdout.splitlines() if line.strip())

    def adopt(self, trial, handle, run_dir=None, log_path=None):
        """True if the segment's job is still queued or running: by the handle's job id; or else,
        for a job submitted just before the controller was killed, whose id was never saved,
        the live job of this trial's name that writes to the trial's log (another sweep of the
        same name has other logs)."""
        job = (handle or {}).get("job")
        states = self._states()
        if not (job and states.get(job, "COMPLETED") not in self.ENDED) and log_path:
            job = next((j for j in self._jobs_named(f"{self.name}-{trial}")
                        if states.get(j, "COMPLETED") not in self.ENDED and self._stdout(j) == os.path.abspath(log_path)),
                       None)
        if job and states.get(job, "COMPLETED") not in self.ENDED:
            self.running[trial] = job
            return True
        return False

    def _jobs_named(self, name):
        r = subprocess.run(["squeue", "-h", "-n", name, "-o", "%i"], capture_output=True, text=True)
        if r.returncode != 0:
            raise RuntimeError(f"squeue failed ({r.returncode}): {r.stderr.strip()}")
        return r.stdout.split()

    def _field(self, job, key):
        r = subprocess.run(["scontrol", "show", "job", "-o", job], capture_output=True, text=True)
        for field in r.stdout.split():
            if field.startswith(key + "="):
                return field[len(key) + 1:]
        return None  # forgotten by slurmctld (MinJobAge)

    def _stdout(self, job):
        return self._field(job, "StdOut")

    def _exit_status(self, job):
        field = self._field(job, "ExitCode")
        if field is None:
            return None  # forgotten by slurmctld: the controller reads run.json
        code, _, sig = field.partition(":")
        return int(code) if sig in ("", "0") else 128 + int(sig)

    def poll(self):
        if not self.running:
            return {}
        states = self._states()
        done = {t: self._exit_status(j) for t, j in self.running.items() if states.get(j, "COMPLETED") in self.ENDED}
        for t in done:
            del self.running[t]
        return done

    def stop(self, trial):
        job = self.running.get(trial)
        if job is None:
            return
        if self._states().get(job) == "PENDING":
            subprocess.run(["scancel", job], capture_output=True)  # nothing ran: nothing to save
        else:
            # The batch shell traps USR1 and hands it to loom, which saves and exits 75.
            subprocess.run(["scancel", "--batch", "--signal=USR1", job], capture_output=True)

    def stop_all(self):
        for t in list(self.running):
            self.stop(t)
