#pragma once
// Stopping early and cleanly, for preemption, time limits and Ctrl-C. SIGUSR1 (what Slurm's
// `--signal=USR1@N` sends ahead of a time limit; mpirun and srun forward it to the ranks),
// SIGTERM (what Slurm sends at the limit or on preemption, and mpirun on its own SIGTERM or
// Ctrl-C) and SIGINT (Ctrl-C of a rank run without a launcher) only set a flag here; the trainer
// reads it at the next step boundary, the ranks agree on it, and the job saves a checkpoint and
// exits with kExitResumable, which the batch templates turn into a requeue. A second SIGINT ends
// the process at once (the default action): Ctrl-C twice always works.
//
// Exit statuses of `loom train` (docs/runs.md has the table):
//   0   trained to train.steps or train.stop_at_step
//   1   failed while training (the error is printed; run.json records it)
//   2   refused before training: bad recipe, data, checkpoint, or a directory another job holds
//   3   the communication watchdog aborted the job (a rank dead or stuck)
//   4   stopped early (signal, train.max_minutes) with nothing saved: checkpoint.dir is not set,
//       so running again starts over
//   75  stopped early with a checkpoint of the last step saved: run the same command to resume
#include <csignal>

#include <cstdint>
#include <cstdlib>

namespace loom {

constexpr int kExitResumable = 75;  // sysexits' EX_TEMPFAIL: "try again later"
constexpr int kExitStoppedNothingSaved = 4;

namespace detail {
inline volatile std::sig_atomic_t g_stop_signal = 0;
inline void on_stop_signal(int sig) {
  // Ctrl-C twice: stop now (async-signal-safe calls only). A second SIGTERM or SIGUSR1 is not an
  // escalation: launchers deliver them more than once (slurmstepd signals every process of a
  // step and srun/mpirun forward their own copy) and the save in progress must not be killed.
  if (g_stop_signal && sig == SIGINT) {
    std::signal(sig, SIG_DFL);
    std::raise(sig);
    return;
  }
  if (!g_stop_signal) g_stop_signal = sig;
}
}  // namespace detail

inline void install_stop_signals() {
  struct sigaction sa {};
  sa.sa_handler = detail::on_stop_signal;
  sigemptyset(&sa.sa_mask);
  for (int s : {SIGUSR1, SIGTERM, SIGINT}) sigaddset(&sa.sa_mask, s);  // one handler at a time
  sa.sa_flags = SA_RESTART;  // a signal must not fail a read or an MPI call in progress
  sigaction(SIGUSR1, &sa, nullptr);
  sigaction(SIGTERM, &sa, nullptr);
  sigaction(SIGINT, &sa, nullptr);
}

// 0, or the signal received (SIGUSR1, SIGTERM, SIGINT).
inline int stop_signal() { return detail::g_stop_signal; }

inline const char* stop_signal_name() {
  switch (stop_signal()) {
    case SIGUSR1: return "SIGUSR1: a time limit ahead";
    case SIGTERM: return "SIGTERM: preemption, a time limit, or mpirun stopping the job";
    case SIGINT: return "SIGINT: Ctrl-C";
    default: return "received by another rank";
  }
}

}  // namespace loom
