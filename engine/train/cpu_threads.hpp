#pragma once
// OpenMP threads against the cores a node's ranks share (CPU backend). Threads beyond the cores
// are not a little slower but several times slower: OpenMP's barriers and Open MPI's progress loop
// both wait by spinning, so a waiting thread holds a core another one needs. Measured on a 2-core
// machine: 2 ranks of the tiny recipe with 2 OpenMP threads each took 17 s for what 1 thread each
// did in 2.5 s. torchrun sets OMP_NUM_THREADS=1 for every process for this reason; Loom leaves the
// thread count to the user (it changes a CPU run's last bits: another split of the matmuls' sums)
// and says at start when the launch oversubscribes the cores.
#include <string>
#include <vector>

namespace loom {

struct CpuThreads {
  std::string host;
  int ranks_on_node = 1;     // ranks of this job on the host
  int threads_per_rank = 1;  // OpenMP threads a rank runs (omp_get_max_threads)
  int cores_on_node = 1;     // the host's online CPUs
  int cores_of_rank = 1;     // the CPUs this rank may run on (its affinity: a launcher's binding, a cgroup)
};

// "" when the threads fit the cores; otherwise one note saying how many threads the launch runs
// on how few cores, why that is slow, and what to set instead.
std::string cpu_oversubscription_note(const CpuThreads& t);

// This process's figures, its node's rank count taken from every rank's host name (world order).
CpuThreads this_rank_cpu_threads(const std::vector<std::string>& hosts, int world_rank);

}  // namespace loom
