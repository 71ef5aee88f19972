#pragma once
// OpenMP threads against the cores a node's ranks share (CPU backend). Threads beyond the cores
// are not a little slower but several times slower: OpenMP's barriers and Open MPI's progress loop
// both wait by spinning, so a waiting thread holds a core another one needs. Measured on a 2-core
// machine: 2 ranks of the tiny recipe with 2 OpenMP threads each took 17 s for what 1 thread each
// did in 2.5 s. torchrun sets OMP_NUM_THREADS=1 for every process for this reason; Loom leaves the
// thread count to the user (it changes a CPU run's last bits: another split of the matmuls' sums)
// and says at start when the launch oversubscribes the cores.
//
// A node's cores are the union of its ranks' CPU affinities (a cpuset, a Slurm cgroup, a launcher's
// binding), not the CPUs the machine has: 2 ranks in a 2-CPU container on a 64-CPU host share 2.
// A CPU quota (cgroup cpu.max) is not seen.
#include <string>
#include <vector>

namespace loom {

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

// This process's host and CPU affinity as one line ("HOST\t0,1,2,3"; no CPUs when unknown), to be
// gathered from every rank.
std::string cpu_affinity_line(const std::string& host);

// Rank `rank`'s figures from every rank's cpu_affinity_line (world order); `threads_per_rank` is
// that rank's OpenMP thread count. Throws std::invalid_argument on a line without a tab.
CpuThreads cpu_threads_of(const std::vector<std::string>& lines, int rank, int threads_per_rank);

}  // namespace loom
