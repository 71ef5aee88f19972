#include "parallel/bounded_abort.hpp"

#include "parallel/abort_hooks.hpp"

#include <mpi.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <thread>

namespace loom::parallel {
namespace {

volatile std::sig_atomic_t g_code = 1;

// Async-signal-safe: write(2) and _exit(2) only.
void say_and_exit(const char* why) {
  const ssize_t ignored = ::write(STDERR_FILENO, why, std::strlen(why));
  (void)ignored;
  ::_exit(int(g_code));
}

void on_alarm(int) { say_and_exit("loom: MPI_Abort did not end this rank in time; exiting (SIGALRM)\n"); }

}  // namespace

void abort_job(int code, double deadline_s) {
  static std::atomic<bool> started{false};
  if (!started.exchange(true)) {
    g_code = code;
    std::fflush(stdout);
    std::fflush(stderr);
    std::thread([deadline_s] {
      std::this_thread::sleep_for(std::chrono::duration<double>(deadline_s));
      say_and_exit("loom: MPI_Abort did not end this rank in time; exiting\n");
    }).detach();
    // The second backstop, a second later: the handler runs in whichever thread can take it.
    struct sigaction sa {};
    sa.sa_handler = on_alarm;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGALRM, &sa, nullptr);
    sigset_t alarm_only;
    sigemptyset(&alarm_only);
    sigaddset(&alarm_only, SIGALRM);
    pthread_sigmask(SIG_UNBLOCK, &alarm_only, nullptr);
    ::alarm(static_cast<unsigned>(std::ceil(deadline_s)) + 1);
    // NCCL communicators first (abort_hooks.hpp): a kernel spinning in a collective with a dead
    // peer ends only by ncclCommAbort. Half the deadline at most, so MPI_Abort still gets its turn.
    run_abort_hooks(deadline_s / 2);
    MPI_Abort(MPI_COMM_WORLD, code);
    std::_Exit(code);  // MPI_Abort does not return; for broken MPIs
  }
  // Another thread is already aborting: wait for it to end the process.
  for (;;) std::this_thread::sleep_for(std::chrono::seconds(1));
}

}  // namespace loom::parallel
