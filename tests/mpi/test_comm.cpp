// Every collective of MpiCommunicator, blocking and not, on odd sizes (0, 1, sizes not
// divisible by the group), with integer-valued floats so each result is exact; and the process
// groups of the world's grid against the GridLayout arithmetic. Run under mpirun; prints
// "N passed, M failed" on rank 0 and exits non-zero on any failure (on any rank).
#include <mpi.h>

#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "parallel/bucket_plan.hpp"  // even_counts
#include "parallel/mpi_world.hpp"
#include "parallel/process_groups.hpp"

using namespace loom::parallel;

namespace {
int passed = 0, failed = 0;
void check(bool ok, const std::string& what, int rank) {
  if (ok) {
    ++passed;
  } else {
    ++failed;
    std::fprintf(stderr, "rank %d: FAILED %s\n", rank, what.c_str());
  }
}
float val(size_t i, int rank) { return float((rank + 1) * int(i % 5 + 1)); }

void test_collectives(MpiCommunicator& c, const std::string& name) {
  const int n = c.size(), me = c.rank();
  const float rsum = float(n * (n + 1) / 2);
  for (size_t count : {size_t(0), size_t(1), size_t(3), size_t(7), size_t(1000), size_t(4097)}) {
    for (bool nonblocking : {false, true}) {
      const std::string tag = name + " count " + std::to_string(count) + (nonblocking ? " (i)" : "");
      std::vector<float> b(count);
      for (size_t i = 0; i < count; ++i) b[i] = val(i, me);
      if (nonblocking) c.iall_reduce(b.data(), count, ReduceOp::Sum)->wait();
      else c.all_reduce(b.data(), count, ReduceOp::Sum);
      bool ok = true;
      for (size_t i = 0; i < count; ++i) ok &= b[i] == float(i % 5 + 1) * rsum;
      check(ok, "all_reduce sum " + tag, me);

      for (size_t i = 0; i < count; ++i) b[i] = val(i, me);
      c.all_reduce(b.data(), count, ReduceOp::Max);
      ok = true;
      for (size_t i = 0; i < count; ++i) ok &= b[i] == val(i, n - 1);
      check(ok, "all_reduce max " + tag, me);

      auto parts = even_counts(count, n);
      size_t off = 0;
      for (int r = 0; r < me; ++r) off += parts[size_t(r)];
      for (size_t i = 0; i < count; ++i) b[i] = val(i, me);
      std::vector<float> out(parts[size_t(me)] + 1, -1.0f);
      if (nonblocking) c.ireduce_scatter(b.data(), out.data(), parts)->wait();
      else c.reduce_scatter(b.data(), out.data(), parts);
      ok = out[parts[size_t(me)]] == -1.0f;  // nothing written past the part
      for (size_t j = 0; j < parts[size_t(me)]; ++j) ok &= out[j] == float((off + j) % 5 + 1) * rsum;
      check(ok, "reduce_scatter " + tag, me);

      std::fill(b.begin(), b.end(), -7.0f);
      for (size_t j = 0; j < parts[size_t(me)]; ++j) b[off + j] = float(off + j);
      if (nonblocking) c.iall_gather(b.data(), parts)->wait();
      else c.all_gather(b.data(), parts);
      ok = true;
      for (size_t i = 0; i < count; ++i) ok &= b[i] == float(i);
      check(ok, "all_gather " + tag, me);
    }
    std::vector<float> b(count, float(me));
    c.broadcast(b.data(), count, n - 1);
    bool ok = true;
    for (float x : b) ok &= x == float(n - 1);
    check(ok, name + " broadcast count " + std::to_string(count), me);
  }
  // A ring of send/recv, blocking and non-blocking.
  if (n > 1) {
    std::vector<float> out(5, float(me)), in(5, -1.0f);
    auto rq = c.irecv(in.data(), 5, (me + n - 1) % n, 3);
    auto sq = c.isend(out.data(), 5, (me + 1) % n, 3);
    rq->wait();
    sq->wait();
    check(in[4] == float((me + n - 1) % n), name + " isend/irecv ring", me);
  }
  c.barrier();
}
}  // namespace

int main(int argc, char** argv) {
  MpiWorld world(&argc, &argv);
  {
    MpiCommunicator w(world.comm());
    test_collectives(w, "world");
    if (argc > 1) {  // "tp dp pp": also check the grid's groups
      GridLayout g{std::atoi(argv[1]), std::atoi(argv[2]), std::atoi(argv[3])};
      ProcessGroups groups(world.comm(), g);
      const int me = world.rank();
      auto members = [&](MpiCommunicator& c) {
        std::vector<int> all(size_t(c.size()));
        MPI_Allgather(&me, 1, MPI_INT, all.data(), 1, MPI_INT, c.comm());
        return all;
      };
      check(members(groups.tp()) == g.tp_group(me), "tp group members", me);
      check(members(groups.dp()) == g.dp_group(me), "dp group members", me);
      check(members(groups.pp()) == g.pp_group(me), "pp group members", me);
      test_collectives(groups.tp(), "tp group");
      test_collectives(groups.dp(), "dp group");
    }
  }
  int local = failed, total_failed = 0, total_passed = 0;
  MPI_Allreduce(&local, &total_failed, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
  MPI_Allreduce(&passed, &total_passed, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
  if (world.rank() == 0) std::printf("%d passed, %d failed\n", total_passed, total_failed);
  return total_failed == 0 ? 0 : 1;
}
