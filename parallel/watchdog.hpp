#pragma once
// The no-hang guarantee for communication. Every blocking MPI call Loom makes (and each
// collective its communicators' worker threads run) is wrapped in a Watchdog::Scope naming the
// operation and the group. A watchdog thread checks the open scopes; one that has been open for
// longer than parallel.timeout_s means a peer is dead, stuck or lost: the rank prints which
// operation on which group at which step it was waiting in, and aborts the whole job
// (MPI_Abort), so that no rank waits forever for another. With NCCL the same place would call
// ncclCommAbort first.
#include <cstdint>
#include <string>

namespace loom::parallel {

class Watchdog {
 public:
  // Starts the checking thread (timeout_s <= 0: off, scopes cost one relaxed atomic load).
  static void start(double timeout_s, int world_rank);
  static void stop();
  // The training step now running, for the message (-1: not in the training loop).
  static void set_step(int64_t step);

  class Scope {
   public:
    // `op` and `group` must outlive the scope (string literals, a communicator's name).
    Scope(const char* op, const char* group);
    ~Scope();
    Scope(const Scope&) = delete;
    Scope& operator=(const Scope&) = delete;

   private:
    int slot_ = -1;
  };
};

}  // namespace loom::parallel
