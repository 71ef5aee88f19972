#pragma once
// What a rank must do before the job is aborted, whoever aborts it (the watchdog, a failed rank's
// error, a signal): each NCCL communicator registers ncclCommAbort of itself. A collective whose
// peer is dead spins in a GPU kernel that nothing else ends; the abort flag ends it, so the
// device is released and the process can exit when MPI_Abort or the deadline ends it
// (bounded_abort.hpp runs the hooks just before MPI_Abort).
//
// No MPI, no CUDA here: the registry is plain C++ and unit-tested on the CPU
// (tests/unit/test_abort_hooks.cpp).
#include <functional>
#include <string>

namespace loom::parallel {

// Registers `hook` ("what" names it in the message) and returns its id for remove_abort_hook.
// Thread-safe.
int add_abort_hook(std::string what, std::function<void()> hook);
void remove_abort_hook(int id);

// Runs every registered hook once, in the order they were added, one after the other on a
// detached thread, and waits for them at most `deadline_s` in all (an ncclCommAbort can itself
// block on a wedged network; a hook that hangs holds up the ones after it, not the abort). A hook
// that throws counts as done. Returns how many finished in time; prints one line (stderr) naming
// those that did not. Only the first call in a process runs anything (abort paths can race);
// later calls return 0 at once. Safe from any thread.
int run_abort_hooks(double deadline_s);

}  // namespace loom::parallel
