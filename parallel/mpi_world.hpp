#pragma once
// The MPI world: start-up, the rank/size of this process, and the two ways a job ends early:
// an error every rank agrees on (all exit with the same status, message printed once) and an
// error on one rank (MPI_Abort takes the whole job down, nobody hangs).
#include <mpi.h>

#include <stdexcept>
#include <string>
#include <vector>

namespace loom::parallel {

// The MPI_COMM_WORLD rank of each member of `comm`, in `comm`'s rank order (a communicator's
// watchdog channel: a timed-out call names the members that never came).
std::vector<int> world_ranks(MPI_Comm comm);

// Every rank of `comm` passes its own error ("" = none). Collective: returns on every rank the
// error of the lowest-numbered failing rank, prefixed with that rank when not every rank failed
// ("" if none did). The way a check that may fail on some ranks only ends on all of them
// together instead of leaving the others waiting in their next collective call.
std::string agree_on_error(const std::string& local_error, MPI_Comm comm);
class MpiCommunicator;
std::string agree_on_error(const std::string& local_error, MpiCommunicator& group);  // over the group

// Runs fn() on this rank; if it throws on any rank of `group` (an MpiCommunicator or an MPI_Comm),
// every rank throws the agreed error (`context` + the exception's message, as agree_on_error
// picks it). Collective: for start-up work that may fail on some ranks only, before the next
// collective would leave the others waiting.
template <typename Group, typename Fn>
void agreed(Group&& group, Fn&& fn, const std::string& context = "") {
  std::string error;
  try {
    fn();
  } catch (const std::exception& e) {
    error = context + e.what();
  }
  if (error = agree_on_error(error, group); !error.empty()) throw std::runtime_error(error);
}

class MpiWorld {
 public:
  // MPI_Init_thread (MPI_THREAD_MULTIPLE if offered, for background I/O threads). Works under
  // mpirun/srun and as a 1-rank singleton.
  MpiWorld(int* argc, char*** argv);
  ~MpiWorld();
  MpiWorld(const MpiWorld&) = delete;
  MpiWorld& operator=(const MpiWorld&) = delete;

  int rank() const { return rank_; }
  int size() const { return size_; }
  MPI_Comm comm() const { return MPI_COMM_WORLD; }
  std::string hostname() const;
  // Every rank's `s`, in rank order, on every rank. Collective (host_collectives.hpp's, over the
  // world before any MpiCommunicator exists).
  std::vector<std::string> all_gather(const std::string& s) const;

  // Every rank passes its own error ("" = none). Collective: returns on every rank the error of
  // the lowest-numbered failing rank, prefixed with that rank when the world has more than one
  // ("" if no rank failed). Used for start-up checks, so that no rank goes on alone.
  std::string agree_on_error(const std::string& local_error) const;

  // Prints "loom: rank R (host): what" to stderr and aborts every rank with `code`.
  [[noreturn]] void abort(const std::string& what, int code) const;

 private:
  int rank_ = 0, size_ = 1;
};

}  // namespace loom::parallel
