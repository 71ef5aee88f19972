#include "engine/train/cpu_threads.hpp"

#include <omp.h>
#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <set>
#include <sstream>
#include <stdexcept>

#include "parallel/mpi_world.hpp"

namespace loom {
namespace {

std::string count(int n, const char* one, const char* many) { return std::to_string(n) + " " + (n == 1 ? one : many); }

struct Affinity {
  std::string host;
  std::set<int> cpus;
};

Affinity parse(const std::string& line) {
  const size_t tab = line.rfind('\t');
  if (tab == std::string::npos) throw std::invalid_argument("cpu affinity line without a tab: '" + line + "'");
  Affinity a{line.substr(0, tab), {}};
  std::istringstream in(line.substr(tab + 1));
  for (std::string cpu; std::getline(in, cpu, ',');)
    if (!cpu.empty()) a.cpus.insert(std::stoi(cpu));
  return a;
}

}  // namespace

std::string cpu_oversubscription_note(const CpuThreads& t) {
  if (t.ranks_on_node < 1 || t.threads_per_rank < 1 || t.cores_on_node < 1 || t.cores_of_rank < 1) return "";
  const int threads = t.ranks_on_node * t.threads_per_rank;
  const bool node_over = threads > t.cores_on_node;
  const bool rank_over = t.threads_per_rank > t.cores_of_rank;
  if (!node_over && !rank_over) return "";
  std::ostringstream s;
  s << "loom: note: ";
  if (node_over) {
    const bool one = t.ranks_on_node == 1;
    s << count(t.ranks_on_node, "rank", "ranks") << " on " << t.host << (one ? " runs " : " run ")
      << count(t.threads_per_rank, "OpenMP thread", "OpenMP threads") << (one ? "" : " each") << ": "
      << count(threads, "thread", "threads") << " on the " << count(t.cores_on_node, "core", "cores")
      << (one ? " it may run on" : " they may run on");
    if (rank_over && t.cores_of_rank < t.cores_on_node)
      s << ", rank 0 on " << count(t.cores_of_rank, "core", "cores") << " of them (its CPU affinity)";
  } else {
    s << "rank 0 runs " << count(t.threads_per_rank, "OpenMP thread", "OpenMP threads") << " on the "
      << count(t.cores_of_rank, "core", "cores") << " its CPU affinity allows (a launcher's binding: mpirun "
      << "binds 1-2 ranks to a core each unless given --bind-to none)";
  }
  s << ". Threads beyond the cores make training several times slower (OpenMP and MPI wait by spinning): ";
  const int fit = std::min(t.cores_on_node / t.ranks_on_node, t.cores_of_rank);  // 0: more ranks than cores
  if (fit >= 1 && fit < t.threads_per_rank)
    s << "set OMP_NUM_THREADS=" << fit << " (the cores each rank gets; the Slurm templates set it from "
      << "--cpus-per-task)";
  else
    s << "more ranks than cores on " << t.host << ", run at most " << t.cores_on_node << " there";
  return s.str();
}

int fitting_threads(const CpuThreads& t) {
  if (t.ranks_on_node < 1 || t.cores_on_node < 1 || t.cores_of_rank < 1) return 0;
  return std::max(1, std::min(t.cores_on_node / t.ranks_on_node, t.cores_of_rank));
}

ThreadChoice choose_cpu_threads(const std::vector<std::string>& lines, int rank, int threads_now,
                                const char* omp_num_threads_env) {
  CpuThreads t = cpu_threads_of(lines, rank, threads_now);
  ThreadChoice c;
  const int fit = fitting_threads(t);
  const bool set = omp_num_threads_env && *omp_num_threads_env;
  if (set || fit < 1 || fit >= threads_now) {
    c.note = cpu_oversubscription_note(t);
    if (set) c.source = "OMP_NUM_THREADS";
    return c;
  }
  c.threads = fit;
  c.source = "cores";
  t.threads_per_rank = fit;
  const bool one = t.ranks_on_node == 1;
  c.note = "loom: note: OMP_NUM_THREADS is not set: " + count(fit, "OpenMP thread", "OpenMP threads") +
           (one ? "" : " per rank") + ", not OpenMP's default " + std::to_string(threads_now) + " (" +
           (one ? "the " + count(t.cores_on_node, "core", "cores") + " rank 0's CPU affinity allows"
                : count(t.ranks_on_node, "rank", "ranks") + " share the " + count(t.cores_on_node, "core", "cores") +
                      " on " + t.host) +
           "; threads beyond the cores wait by spinning). Set OMP_NUM_THREADS to choose";
  if (std::string over = cpu_oversubscription_note(t); !over.empty()) c.note += "\n" + over;
  return c;
}

std::string cpu_affinity_line(const std::string& host) {
  std::set<int> cpus;
  if (omp_get_proc_bind() != omp_proc_bind_false && omp_get_num_places() > 0) {
    // OpenMP's binding is on (OMP_PROC_BIND, OMP_PLACES, GOMP_CPU_AFFINITY): libgomp pinned this
    // thread to the first place as it loaded, so its affinity shows that place alone (1 CPU of a
    // whole node); the places span the CPUs the process was given.
    for (int p = 0; p < omp_get_num_places(); ++p) {
      std::vector<int> ids(size_t(omp_get_place_num_procs(p)));
      omp_get_place_proc_ids(p, ids.data());
      cpus.insert(ids.begin(), ids.end());
    }
  } else {
    cpu_set_t set;
    CPU_ZERO(&set);
    if (sched_getaffinity(0, sizeof set, &set) != 0) return host + "\t";  // unknown: no CPUs listed
    for (int cpu = 0; cpu < CPU_SETSIZE; ++cpu)
      if (CPU_ISSET(cpu, &set)) cpus.insert(cpu);
  }
  std::string line = host + "\t";
  for (int cpu : cpus) {
    if (cpu != *cpus.begin()) line += ',';
    line += std::to_string(cpu);
  }
  return line;
}

CpuThreads cpu_threads_of(const std::vector<std::string>& lines, int rank, int threads_per_rank) {
  const Affinity me = parse(lines.at(size_t(rank)));
  CpuThreads t;
  t.host = me.host;
  t.threads_per_rank = threads_per_rank;
  t.cores_of_rank = int(me.cpus.size());
  std::set<int> node;
  bool known = true;
  for (const std::string& line : lines) {
    const Affinity a = parse(line);
    if (a.host != me.host) continue;
    ++t.ranks_on_node;
    known = known && !a.cpus.empty();
    node.insert(a.cpus.begin(), a.cpus.end());
  }
  t.cores_on_node = known ? int(node.size()) : 0;
  return t;
}

ThreadChoice settle_cpu_threads(const AllGather& all_gather, int rank, bool apply) {
  char host[64] = {};
  gethostname(host, sizeof host - 1);  // as gather_hostnames (rank_reports.cpp) names it
  const std::vector<std::string> lines = all_gather(cpu_affinity_line(host));
  if (!apply) return {};
  const ThreadChoice c = choose_cpu_threads(lines, rank, omp_get_max_threads(), std::getenv("OMP_NUM_THREADS"));
  if (c.threads > 0) omp_set_num_threads(c.threads);
  return c;
}

ThreadChoice settle_cpu_threads(const parallel::MpiWorld& world, bool apply) {
  return settle_cpu_threads([&](const std::string& s) { return world.all_gather(s); }, world.rank(), apply);
}

}  // namespace loom
