#pragma once
// Stopping early and cleanly, for preemption and time limits. SIGUSR1 (what Slurm's
// `--signal=USR1@N` sends ahead of a time limit; mpirun and srun forward it to the ranks) and
// SIGTERM (what Slurm sends at the limit or on preemption) only set a flag here; the trainer
// reads it at the next step boundary, the ranks agree on it, and the job saves a checkpoint and
// exits with kExitResumable, which the batch templates turn into a requeue.
#include <csignal>

namespace loom {

// Exit status of a run that stopped early with a checkpoint and can be resumed (sysexits'
// EX_TEMPFAIL: "try again later").
constexpr int kExitResumable = 75;

namespace detail {
inline volatile std::sig_atomic_t g_stop_signal = 0;
inline void on_stop_signal(int sig) { g_stop_signal = sig; }
}  // namespace detail

inline void install_stop_signals() {
  struct sigaction sa {};
  sa.sa_handler = detail::on_stop_signal;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART;  // a signal must not fail a read or an MPI call in progress
  sigaction(SIGUSR1, &sa, nullptr);
  sigaction(SIGTERM, &sa, nullptr);
}

// 0, or the signal received (SIGUSR1, SIGTERM).
inline int stop_signal() { return detail::g_stop_signal; }

}  // namespace loom
