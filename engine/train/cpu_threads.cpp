#include "engine/train/cpu_threads.hpp"

#include <omp.h>
#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <sstream>

namespace loom {

std::string cpu_oversubscription_note(const CpuThreads& t) {
  const int threads = t.ranks_on_node * t.threads_per_rank;
  const bool node_over = threads > t.cores_on_node;
  const bool rank_over = t.threads_per_rank > t.cores_of_rank;
  if (!node_over && !rank_over) return "";
  std::ostringstream s;
  s << "loom: note: ";
  if (node_over) {
    s << t.ranks_on_node << (t.ranks_on_node == 1 ? " rank" : " ranks") << " on " << t.host << " run "
      << t.threads_per_rank << " OpenMP thread" << (t.threads_per_rank == 1 ? "" : "s") << " each: " << threads
      << " threads on " << t.cores_on_node << (t.cores_on_node == 1 ? " core" : " cores");
    if (rank_over) s << ", and rank 0 may run on " << t.cores_of_rank << " of them (its CPU affinity)";
  } else {
    s << "rank 0 runs " << t.threads_per_rank << " OpenMP threads on the " << t.cores_of_rank
      << (t.cores_of_rank == 1 ? " core" : " cores") << " its CPU affinity allows (a launcher's binding: mpirun "
      << "binds 1-2 ranks to a core each unless given --bind-to none)";
  }
  const int fit = std::max(1, std::min(t.cores_on_node / std::max(1, t.ranks_on_node), t.cores_of_rank));
  s << ". Threads beyond the cores make training several times slower (OpenMP and MPI wait by spinning): set "
    << "OMP_NUM_THREADS=" << fit << " (the cores / the ranks per node; the Slurm templates set it from "
    << "--cpus-per-task)";
  return s.str();
}

CpuThreads this_rank_cpu_threads(const std::vector<std::string>& hosts, int world_rank) {
  CpuThreads t;
  t.host = hosts.at(size_t(world_rank));
  t.ranks_on_node = int(std::count(hosts.begin(), hosts.end(), t.host));
  t.threads_per_rank = omp_get_max_threads();
  t.cores_on_node = std::max(1, int(sysconf(_SC_NPROCESSORS_ONLN)));
  cpu_set_t set;
  t.cores_of_rank = sched_getaffinity(0, sizeof set, &set) == 0 ? std::max(1, CPU_COUNT(&set)) : t.cores_on_node;
  return t;
}

}  // namespace loom
