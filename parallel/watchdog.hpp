#pragma once
// The no-hang guarantee for communication. Every blocking MPI call Loom makes (and each
// collective its communicators' worker threads run) is wrapped in a Watchdog::Scope naming the
// operation and the group. A watchdog thread checks the open scopes; one that has been open for
// longer than parallel.timeout_s means a peer is dead, stuck or lost: the rank prints which
// operation on which group at which step it was waiting in, and aborts the whole job
// (MPI_Abort), so that no rank waits forever for another. NCCL communicators watch their waits
// with the same scopes, and the abort runs their ncclCommAbort first (abort_hooks.hpp).
//
// Naming the rank that is stuck, not only the one that waits: each communicator registers a
// *channel* (its members' world ranks) and every rank counts the collectives it has entered on
// each channel. Collectives are issued in the same order on every member, so when rank R's k-th
// collective on a channel times out, the members whose count is below k have not reached it.
// R's watchdog asks every member over a side channel (a duplicate of MPI_COMM_WORLD made by
// start(), used only by the watchdog threads, which answer each other without involving the main
// threads): each answers with its count, its training step and the communication call it is in,
// if any. A rank that does not answer within a few seconds (killed, or its whole process stuck)
// is named as unresponsive. The question and the wait are bounded; then the job is aborted
// (bounded_abort.hpp: the rank ends itself if MPI_Abort does not end it promptly). Every rank is
// named with its host ("3 on node7"): the hosts are gathered when the watchdog starts.
#include <cstdint>
#include <string>
#include <vector>

namespace loom::parallel {

class Watchdog {
 public:
  // Starts the checking thread (timeout_s <= 0: off, scopes cost one relaxed atomic load).
  // Collective over MPI_COMM_WORLD the first time (it duplicates it for the side channel): every
  // rank calls it at the same point.
  static void start(double timeout_s, int world_rank);
  static void stop();
  // The training step now running, for the message (-1: not in the training loop).
  static void set_step(int64_t step);
  // `probe` returns the stop signal this process has received (0: none; it is read from the
  // watchdog's thread, so it must be safe to call from any thread). Once one has arrived and a
  // communication call stays blocked for a second, the watchdog asks every rank whether it is
  // alive and, if one is not, aborts the job at once: the step cannot complete, so the save the
  // signal asked for cannot happen, and waiting for parallel.timeout_s or the launcher's SIGKILL
  // only delays the end. nullptr: off.
  static void set_stop_probe(int (*probe)());

  // A communicator's channel: `group` names it in messages ("tensor-parallel"; must outlive the
  // channel), `members` are the world ranks of the communicator in its rank order. The same
  // communicator must be registered in the same order on every member (communicators are built
  // collectively, so this holds). Returns the channel id for Scope (-1: no free channel).
  static int register_channel(const char* group, const std::vector<int>& members);
  static void release_channel(int channel);

  class Scope {
   public:
    // `op` and `group` must outlive the scope (string literals, a communicator's name).
    // `channel` (from register_channel) counts this call on its communicator; `collective`:
    // every member takes part (all_reduce, barrier, ...), so a member that has not entered it
    // is one the others are waiting for (send/recv: false).
    Scope(const char* op, const char* group, int channel = -1, bool collective = true);
    ~Scope();
    Scope(const Scope&) = delete;
    Scope& operator=(const Scope&) = delete;

   private:
    int slot_ = -1;
  };
};

}  // namespace loom::parallel
