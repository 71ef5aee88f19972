// The start-of-run note on OpenMP threads oversubscribing a node's cores (engine/train/cpu_threads.hpp).
#include <catch2/catch.hpp>

#include "engine/train/cpu_threads.hpp"

using loom::CpuThreads;
using loom::cpu_oversubscription_note;

TEST_CASE("cpu threads that fit the cores give no note", "[cpu_threads]") {
  CHECK(cpu_oversubscription_note({"n1", 2, 1, 2, 2}).empty());  // 2 ranks x 1 thread on 2 cores
  CHECK(cpu_oversubscription_note({"n1", 1, 2, 2, 2}).empty());  // 1 rank x 2 threads
  CHECK(cpu_oversubscription_note({"n1", 4, 8, 32, 8}).empty());  // bound to 8 cores each, 8 threads
  CHECK(cpu_oversubscription_note({"n1", 1, 1, 1, 1}).empty());
}

TEST_CASE("more threads than the node's cores are said, with the thread count that fits", "[cpu_threads]") {
  const std::string n = cpu_oversubscription_note({"node7", 2, 2, 2, 2});
  CHECK(n.rfind("loom: note: 2 ranks on node7 run 2 OpenMP threads each: 4 threads on 2 cores.", 0) == 0);
  CHECK(n.find("OMP_NUM_THREADS=1 (the cores / the ranks per node;") != std::string::npos);
  CHECK(n.find("affinity") == std::string::npos);
  // 8 ranks of 16 threads on 64 cores: 8 threads each fit.
  CHECK(cpu_oversubscription_note({"a", 8, 16, 64, 64}).find("OMP_NUM_THREADS=8 ") != std::string::npos);
  // More ranks than cores: still at least one thread.
  const std::string many = cpu_oversubscription_note({"a", 8, 1, 2, 2});
  CHECK(many.find("8 threads on 2 cores") != std::string::npos);
  CHECK(many.find("OMP_NUM_THREADS=1 ") != std::string::npos);
}

TEST_CASE("more threads than a rank's affinity allows are said, naming the binding", "[cpu_threads]") {
  // mpirun's default for 2 ranks: each bound to one core, told OMP_NUM_THREADS=2.
  const std::string n = cpu_oversubscription_note({"h", 2, 2, 4, 1});
  CHECK(n.rfind("loom: note: rank 0 runs 2 OpenMP threads on the 1 core its CPU affinity allows", 0) == 0);
  CHECK(n.find("--bind-to none") != std::string::npos);
  CHECK(n.find("OMP_NUM_THREADS=1 ") != std::string::npos);
  // Both at once: the node's count first, the affinity after it.
  const std::string both = cpu_oversubscription_note({"h", 4, 4, 4, 2});
  CHECK(both.find("16 threads on 4 cores, and rank 0 may run on 2 of them (its CPU affinity)") != std::string::npos);
}

TEST_CASE("this rank's figures count the ranks sharing its host name", "[cpu_threads]") {
  const CpuThreads t = loom::this_rank_cpu_threads({"a", "b", "a", "a"}, 2);
  CHECK(t.host == "a");
  CHECK(t.ranks_on_node == 3);
  CHECK(t.threads_per_rank >= 1);
  CHECK(t.cores_on_node >= 1);
  CHECK(t.cores_of_rank >= 1);
  CHECK(t.cores_of_rank <= t.cores_on_node);
}
