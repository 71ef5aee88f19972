// The start-of-run note on OpenMP threads oversubscribing a node's cores (engine/train/cpu_threads.hpp).
#include <catch2/catch.hpp>

#include "engine/train/cpu_threads.hpp"

using loom::CpuThreads;
using loom::cpu_oversubscription_note;
using loom::cpu_threads_of;

namespace {
bool has(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }
}  // namespace

TEST_CASE("cpu threads that fit the cores give no note", "[cpu_threads]") {
  CHECK(cpu_oversubscription_note({"n1", 2, 1, 2, 2}).empty());  // 2 ranks x 1 thread on 2 cores
  CHECK(cpu_oversubscription_note({"n1", 1, 2, 2, 2}).empty());  // 1 rank x 2 threads
  CHECK(cpu_oversubscription_note({"n1", 4, 8, 32, 8}).empty());  // bound to 8 cores each, 8 threads
  CHECK(cpu_oversubscription_note({"n1", 1, 1, 1, 1}).empty());
  // A figure unknown (affinity unreadable): no note rather than a wrong one.
  CHECK(cpu_oversubscription_note({"n1", 2, 4, 0, 1}).empty());
  CHECK(cpu_oversubscription_note({"n1", 2, 4, 2, 0}).empty());
}

TEST_CASE("more threads than the node's cores are said, with the thread count that fits", "[cpu_threads]") {
  const std::string n = cpu_oversubscription_note({"node7", 2, 2, 2, 2});
  CHECK(n.rfind("loom: note: 2 ranks on node7 run 2 OpenMP threads each: 4 threads on the 2 cores they may run on.", 0) == 0);
  CHECK(has(n, "set OMP_NUM_THREADS=1 (the cores each rank gets;"));
  CHECK_FALSE(has(n, "affinity"));
  // 8 ranks of 16 threads on 64 cores: 8 threads each fit.
  CHECK(has(cpu_oversubscription_note({"a", 8, 16, 64, 64}), "set OMP_NUM_THREADS=8 "));
  // One rank, one core: singular words.
  CHECK(has(cpu_oversubscription_note({"solo", 1, 2, 1, 1}),
            "loom: note: 1 rank on solo runs 2 OpenMP threads: 2 threads on the 1 core it may run on."));
}

TEST_CASE("more ranks than cores advise fewer ranks, not a thread count that changes nothing", "[cpu_threads]") {
  const std::string many = cpu_oversubscription_note({"a", 8, 1, 2, 2});
  CHECK(has(many, "8 ranks on a run 1 OpenMP thread each: 8 threads on the 2 cores they may run on."));
  CHECK(has(many, "more ranks than cores on a, run at most 2 there"));
  CHECK_FALSE(has(many, "OMP_NUM_THREADS"));
  // 3 ranks of 2 threads on 2 cores: 1 thread each still leaves 3 on 2, so the same advice.
  CHECK(has(cpu_oversubscription_note({"a", 3, 2, 2, 2}), "run at most 2 there"));
}

TEST_CASE("more threads than a rank's affinity allows are said, naming the binding", "[cpu_threads]") {
  // mpirun's default for 2 ranks: each bound to one core, told OMP_NUM_THREADS=2.
  const std::string n = cpu_oversubscription_note({"h", 2, 2, 4, 1});
  CHECK(n.rfind("loom: note: rank 0 runs 2 OpenMP threads on the 1 core its CPU affinity allows", 0) == 0);
  CHECK(has(n, "--bind-to none"));
  CHECK(has(n, "set OMP_NUM_THREADS=1 "));
  // Both at once: the node's count first, the affinity after it.
  CHECK(has(cpu_oversubscription_note({"h", 4, 4, 4, 2}),
            "16 threads on the 4 cores they may run on, rank 0 on 2 cores of them (its CPU affinity)"));
}

TEST_CASE("a node's cores are the union of its ranks' affinities", "[cpu_threads]") {
  // Two ranks bound to a core each on host a, one rank on b with all four.
  const std::vector<std::string> lines = {"a\t0", "b\t0,1,2,3", "a\t1"};
  const CpuThreads t = cpu_threads_of(lines, 2, 3);
  CHECK(t.host == "a");
  CHECK(t.ranks_on_node == 2);
  CHECK(t.threads_per_rank == 3);
  CHECK(t.cores_on_node == 2);
  CHECK(t.cores_of_rank == 1);
  // Unbound ranks in a 2-CPU cpuset of a large host: 2 cores, whatever the host has.
  const CpuThreads c = cpu_threads_of({"big\t6,7", "big\t6,7"}, 0, 2);
  CHECK(c.cores_on_node == 2);
  CHECK(has(cpu_oversubscription_note(c), "4 threads on the 2 cores they may run on"));
  // An unreadable affinity anywhere on the node: unknown.
  CHECK(cpu_threads_of({"a\t0,1", "a\t"}, 0, 2).cores_on_node == 0);
  CHECK_THROWS_AS(cpu_threads_of({"no tab"}, 0, 1), std::invalid_argument);
  // This process's own line parses back to its host and at least one CPU.
  const CpuThreads me = cpu_threads_of({loom::cpu_affinity_line("here")}, 0, 1);
  CHECK(me.host == "here");
  CHECK(me.cores_of_rank >= 1);
  CHECK(me.cores_on_node == me.cores_of_rank);
}

TEST_CASE("a rank's share of the cores is the node's cores over its ranks within its affinity", "[cpu_threads]") {
  using loom::fitting_threads;
  CHECK(fitting_threads({"n", 2, 2, 2, 2}) == 1);
  CHECK(fitting_threads({"n", 1, 2, 2, 2}) == 2);
  CHECK(fitting_threads({"n", 4, 64, 64, 64}) == 16);
  CHECK(fitting_threads({"n", 3, 8, 8, 8}) == 2);   // the remainder is left idle, not oversubscribed
  CHECK(fitting_threads({"n", 4, 8, 64, 4}) == 4);  // bound to 4 cores: no more than those
  CHECK(fitting_threads({"n", 8, 1, 2, 2}) == 1);   // more ranks than cores: still one thread
  CHECK(fitting_threads({"n", 2, 2, 0, 2}) == 0);   // unknown
  CHECK(fitting_threads({"n", 2, 2, 2, 0}) == 0);
}

TEST_CASE("without OMP_NUM_THREADS each rank runs its share of the cores and rank 0 says so", "[cpu_threads]") {
  using loom::choose_cpu_threads;
  // Two unbound ranks on a 2-CPU node, OpenMP's default 2 threads each: 1 each, one note.
  const std::vector<std::string> two = {"vm\t0,1", "vm\t0,1"};
  for (const char* unset : {static_cast<const char*>(nullptr), ""}) {
    const loom::ThreadChoice c = choose_cpu_threads(two, 0, 2, unset);
    CHECK(c.threads == 1);
    CHECK(c.note ==
          "loom: note: OMP_NUM_THREADS is not set: 1 OpenMP thread per rank, not OpenMP's default 2 (2 ranks share "
          "the 2 cores on vm; threads beyond the cores wait by spinning). Set OMP_NUM_THREADS to choose");
    CHECK(choose_cpu_threads(two, 1, 2, unset).threads == 1);
  }
  // Set: kept as it is, and the oversubscription said instead.
  const loom::ThreadChoice set = choose_cpu_threads(two, 0, 2, "2");
  CHECK(set.threads == 0);
  CHECK(has(set.note, "4 threads on the 2 cores they may run on"));
  CHECK(choose_cpu_threads(two, 0, 1, "1").note.empty());
  // One rank with the node to itself: OpenMP's default already fits, nothing to say.
  CHECK(choose_cpu_threads({"vm\t0,1"}, 0, 2, nullptr).threads == 0);
  CHECK(choose_cpu_threads({"vm\t0,1"}, 0, 2, nullptr).note.empty());
  // Eight ranks on 2 cores: 1 thread each, and the ranks still oversubscribe: both said.
  const std::vector<std::string> eight(8, "vm\t0,1");
  const loom::ThreadChoice many = choose_cpu_threads(eight, 3, 2, nullptr);
  CHECK(many.threads == 1);
  CHECK(has(many.note, "1 OpenMP thread per rank, not OpenMP's default 2 (8 ranks share the 2 cores on vm"));
  CHECK(has(many.note, "\nloom: note: 8 ranks on vm run 1 OpenMP thread each: 8 threads on the 2 cores"));
  CHECK(has(many.note, "more ranks than cores on vm, run at most 2 there"));
  // Ranks on two nodes count their own node's: 2 on a (8 cores) get 4, 1 on b (4 cores) keeps 4.
  const std::vector<std::string> nodes = {"a\t0,1,2,3,4,5,6,7", "a\t0,1,2,3,4,5,6,7", "b\t0,1,2,3"};
  CHECK(choose_cpu_threads(nodes, 1, 8, nullptr).threads == 4);
  CHECK(choose_cpu_threads(nodes, 2, 4, nullptr).threads == 0);
  // An unreadable affinity: nothing chosen, nothing said.
  const loom::ThreadChoice unknown = choose_cpu_threads({"a\t0,1", "a\t"}, 0, 2, nullptr);
  CHECK(unknown.threads == 0);
  CHECK(unknown.note.empty());
}
