#pragma once
// OpenMP threads against the cores a node's ranks share (CPU backend). Threads beyond the cores
// are not a little slower but several times slower: OpenMP's barriers and Open MPI's progress loop
// both wait by spinning, so a waiting thread holds a core another one needs. Measured on a 2-core
// machine: 2 ranks of the tiny recipe with 2 OpenMP threads each took 17 s for what 1 thread each
// did in 2.5 s. torchrun sets OMP_NUM_THREADS=1 for every process for this reason. Loom keeps a
// thread count the user set (OMP_NUM_THREADS: it changes a CPU run's last bits, another split of
// the matmuls' sums) and says at start when it oversubscribes the cores; where none is set, each
// rank runs its share of its node's cores instead of OpenMP's default of all of them.
//
// A node's cores are the union of its ranks' CPU affinities (a cpuset, a Slurm cgroup, a launcher's
// binding), not the CPUs the machine has: 2 ranks in a 2-CPU container on a 64-CPU host share 2.
// With OpenMP's binding on, a rank's CPUs are its OpenMP places' (the main thread is pinned to one).
// A CPU quota (cgroup cpu.max) is not seen.
#include <functional>
#include <string>
#include <vector>

namespace loom {
namespace parallel {
class MpiWorld;
}

struct CpuThreads {
  std::string host;
  int ranks_on_node = 0;     // ranks of this job on the host
  int threads_per_rank = 0;  // OpenMP threads a rank runs (omp_get_max_threads)
  int cores_on_node = 0;     // the CPUs the host's ranks may run on together (0: unknown)
  int cores_of_rank = 0;     // the CPUs this rank may run on (0: unknown)
};

// "" when the threads fit the cores, or when a figure is unknown; otherwise one note saying how
// many threads run on how few cores, why that is slow, and what to do instead.
std::string cpu_oversubscription_note(const CpuThreads& t);

// A rank's share of its node's cores: cores_on_node / ranks_on_node, at most cores_of_rank, at
// least 1 (more ranks than cores); 0 when a figure is unknown.
int fitting_threads(const CpuThreads& t);

struct ThreadChoice {
  int threads = 0;   // the OpenMP threads this rank is to run; 0: keep what it runs
  std::string note;  // for rank 0 to print: what was chosen, or the oversubscription note; "" if none
  // Where the count comes from (run.json): "cores" (chosen here), "OMP_NUM_THREADS" or "OpenMP"
  // (its default, which already fits).
  std::string source = "OpenMP";
};

// What rank `rank` runs, from every rank's cpu_affinity_line, the OpenMP threads it runs now
// (omp_get_max_threads) and the OMP_NUM_THREADS environment variable (null or empty: not set).
// Set: kept, with the oversubscription note where it oversubscribes. Not set: the rank's share
// of the cores where that is fewer threads than it runs (and a note saying so), and the
// oversubscription note only where more ranks than cores remain. Ranks of a node with the same
// affinity choose alike; one bound to fewer cores than its share gets those.
ThreadChoice choose_cpu_threads(const std::vector<std::string>& lines, int rank, int threads_now,
                                const char* omp_num_threads_env);

// This process's host and CPU affinity as one line ("HOST\t0,1,2,3"; no CPUs when unknown), to be
// gathered from every rank.
std::string cpu_affinity_line(const std::string& host);

// Rank `rank`'s figures from every rank's cpu_affinity_line (world order); `threads_per_rank` is
// that rank's OpenMP thread count. Throws std::invalid_argument on a line without a tab.
CpuThreads cpu_threads_of(const std::vector<std::string>& lines, int rank, int threads_per_rank);

// At start, before anything runs OpenMP code (the data's checks do): gathers every rank's
// affinity with `all_gather` (a collective over the world: every rank's string, in rank order)
// and, with `apply` (the CPU backend), applies choose_cpu_threads to `rank` (omp_set_num_threads)
// and returns the choice (the caller prints rank 0's note).
// Every rank calls it, whatever its backend: a rank alone asking for another one fails later,
// agreed, instead of leaving the others in this collective. Only the calling thread's OpenMP
// count is set (libgomp's counts are per thread): Loom's own threads (loader, checkpoint writer,
// communicator) run no OpenMP code.
using AllGather = std::function<std::vector<std::string>(const std::string&)>;
ThreadChoice settle_cpu_threads(const AllGather& all_gather, int rank, bool apply);
// The same over the whole job's world, for the commands that have no process groups yet.
ThreadChoice settle_cpu_threads(const parallel::MpiWorld& world, bool apply);

}  // namespace loom
