#pragma once
// Ending the whole job from one rank, within a bounded time.
//
// MPI_Abort asks the launcher to end every rank of the job; on a healthy job it returns never and
// ends the process quickly. It can block, though: under srun, Open MPI's abort goes through PMIx
// to the local slurmstepd, which propagates it to srun; with the node's link cut that
// propagation waits ~28 s for a timeout, and a site's PMIx may wait longer. A rank that has
// decided to abort must not wait on that: after kAbortDeadlineS it ends itself (_exit with the
// same status), and the launcher, seeing a rank gone with a non-zero status, ends the rest
// (mpirun's orte_abort_on_non_zero_status, srun's --kill-on-bad-exit). Two independent backstops
// enforce the deadline: a detached thread and SIGALRM, so neither a thread nor a signal mask
// inside the MPI library can keep the process alive.
namespace loom::parallel {

// Seconds between MPI_Abort and the process ending itself. Long enough for the abort message to
// reach a launcher on a healthy network (milliseconds), short enough that a job whose rank hit a
// dead link ends within parallel.timeout_s + 15 s (the watchdog's question to the other ranks
// takes at most a few seconds of that).
constexpr double kAbortDeadlineS = 5.0;

// Prints nothing (the caller has said why), calls MPI_Abort(MPI_COMM_WORLD, code), and ends the
// process with `code` after at most `deadline_s` whatever MPI does. Safe to call from any thread,
// and more than once (the first call's code wins).
[[noreturn]] void abort_job(int code, double deadline_s = kAbortDeadlineS);

}  // namespace loom::parallel
