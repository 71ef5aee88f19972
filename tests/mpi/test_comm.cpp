// Every collective of MpiCommunicator, blocking and not, on odd sizes (0, 1, sizes not
// divisible by the group), with integer-valued floats so each result is exact; the same at bf16
// and fp16 (both ways MPI reduces them: the user-defined ops and through fp32; inputs are small
// integers whose every partial sum is exactly representable, so each result is exact too), int32
// where it moves data, dtype errors, GradBuckets over a bf16 buffer; and the process groups of
// the world's grid against the GridLayout arithmetic, and their use_nccl failing on one rank.
// Run under mpirun; prints "N passed, M failed" on rank 0 and exits non-zero on any failure (on
// any rank).
#include <mpi.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <stdexcept>
#include <string>
#include <vector>

#include "parallel/bucket_plan.hpp"  // even_counts
#include "parallel/grad_buckets.hpp"
#include "parallel/mpi_world.hpp"
#include "tests/mpi/mpi_tally.hpp"
#include "parallel/process_groups.hpp"

using namespace loom::parallel;
using loom::bf16;
using loom::DType;
using loom::dtype_name;
using loom::fp16;

namespace {
using loom::test::check;
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
    // One batch per rank, sends first, to both neighbours (what a pipeline stage posts between
    // forward and backward): it must complete whatever order each rank listed its transfers in.
    std::vector<float> to_next(4, float(me)), to_prev(4, float(100 + me)), from_prev(4, -1.0f), from_next(4, -1.0f);
    const int next = (me + 1) % n, prev = (me + n - 1) % n;
    c.itransfers({Transfer::to(to_next.data(), 4, next, 7), Transfer::to(to_prev.data(), 4, prev, 8),
                  Transfer::from(from_prev.data(), 4, prev, 7), Transfer::from(from_next.data(), 4, next, 8)})
        ->wait();
    check(from_prev[3] == float(prev) && from_next[3] == float(100 + next), name + " itransfers, sends first", me);
  }
  c.barrier();
}

// Host buffers of T, read and written as float.
template <typename T>
std::vector<T> filled(size_t n, float (*f)(size_t, int), int rank) {
  std::vector<T> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = T(f(i, rank));
  return v;
}
// Sums: rank r contributes (r % 2 + 1) * (i % 5 + 1); over n ranks at most 5 * 1.5n, every
// partial sum an integer below 256 for n <= 34: exact in bf16 (8 significant bits) and fp16.
float sum_val(size_t i, int rank) { return float((rank % 2 + 1) * int(i % 5 + 1)); }
float weights(int n) { return float(n + n / 2); }
// Max: integers in [-3, 3], negative ones included.
float max_val(size_t i, int rank) { return float(int((i + size_t(rank)) % 7) - 3); }
// Uneven parts: rank 1's is empty, the others differ.
std::vector<size_t> uneven_counts(int n, size_t base) {
  std::vector<size_t> c;
  for (int r = 0; r < n; ++r) c.push_back(r == 1 ? 0 : base + size_t(r) * 3);
  return c;
}

template <typename T>
void test_typed(MpiCommunicator& c, const std::string& name) {
  const int n = c.size(), me = c.rank();
  const DType t = loom::dtype_of<T>;
  const std::string dt = dtype_name(t);
  for (size_t count : {size_t(0), size_t(1), size_t(7), size_t(4097)}) {
    for (bool nonblocking : {false, true}) {
      const std::string tag = name + " " + dt + " count " + std::to_string(count) + (nonblocking ? " (i)" : "");
      auto b = filled<T>(count, sum_val, me);
      if (nonblocking) c.iall_reduce(b.data(), count, ReduceOp::Sum)->wait();
      else c.all_reduce(b.data(), count, ReduceOp::Sum);
      bool ok = true;
      for (size_t i = 0; i < count; ++i) ok &= float(b[i]) == float(i % 5 + 1) * weights(n);
      check(ok, "all_reduce sum " + tag, me);

      b = filled<T>(count, max_val, me);
      if (nonblocking) c.iall_reduce(b.data(), count, ReduceOp::Max)->wait();
      else c.all_reduce(b.data(), count, ReduceOp::Max);
      ok = true;
      for (size_t i = 0; i < count; ++i) {
        float want = -100;
        for (int r = 0; r < n; ++r) want = std::max(want, max_val(i, r));
        ok &= float(b[i]) == want;
      }
      check(ok, "all_reduce max " + tag, me);

      for (const auto& parts : {even_counts(count, n), uneven_counts(n, count)}) {
        size_t off = 0, total = 0;
        for (int r = 0; r < n; ++r) (r < me ? off : total) += parts[size_t(r)];
        total += off;
        auto in = filled<T>(total, sum_val, me);
        std::vector<T> out(parts[size_t(me)] + 1, T(-1.0f));
        if (nonblocking) c.ireduce_scatter(in.data(), out.data(), parts)->wait();
        else c.reduce_scatter(in.data(), out.data(), parts);
        ok = float(out[parts[size_t(me)]]) == -1.0f;  // nothing written past the part
        for (size_t j = 0; j < parts[size_t(me)]; ++j) ok &= float(out[j]) == float((off + j) % 5 + 1) * weights(n);
        check(ok, "reduce_scatter " + tag + " parts " + std::to_string(parts[size_t(me)]), me);

        std::vector<T> g(total, T(-7.0f));
        for (size_t j = 0; j < parts[size_t(me)]; ++j) g[off + j] = T(float((off + j) % 200));
        if (nonblocking) c.iall_gather(g.data(), parts)->wait();
        else c.all_gather(g.data(), parts);
        ok = true;
        for (size_t i = 0; i < total; ++i) ok &= float(g[i]) == float(i % 200);
        check(ok, "all_gather " + tag, me);
      }
    }
    std::vector<T> b(count, T(float(me)));
    c.broadcast(b.data(), count, n - 1);
    bool ok = true;
    for (const T& x : b) ok &= float(x) == float(n - 1);
    check(ok, name + " " + dt + " broadcast count " + std::to_string(count), me);
  }
  if (n > 1) {  // a ring, blocking (even ranks send first) and not
    std::vector<T> out(5, T(float(me))), in(5, T(-1.0f));
    const int next = (me + 1) % n, prev = (me + n - 1) % n;
    if (me % 2 == 0) {
      c.send(out.data(), 5, next, 4);
      c.recv(in.data(), 5, prev, 4);
    } else {
      c.recv(in.data(), 5, prev, 4);
      c.send(out.data(), 5, next, 4);
    }
    check(float(in[4]) == float(prev), name + " " + dt + " send/recv ring", me);
    in.assign(5, T(-1.0f));
    auto rq = c.irecv(in.data(), 5, prev, 5);
    auto sq = c.isend(out.data(), 5, next, 5);
    rq->wait();
    sq->wait();
    check(float(in[4]) == float(prev), name + " " + dt + " isend/irecv ring", me);
  }
}

// int32 moves (broadcast, all_gather, send/recv) but does not reduce.
void test_int32(MpiCommunicator& c, const std::string& name) {
  const int n = c.size(), me = c.rank();
  std::vector<int32_t> b(9, me == 0 ? 123456789 : 0);
  c.broadcast(b.data(), b.size(), 0);
  check(b[8] == 123456789, name + " int32 broadcast", me);
  const auto parts = uneven_counts(n, 2);
  size_t off = 0, total = 0;
  for (int r = 0; r < n; ++r) (r < me ? off : total) += parts[size_t(r)];
  total += off;
  std::vector<int32_t> g(total, -1);
  for (size_t j = 0; j < parts[size_t(me)]; ++j) g[off + j] = int32_t(off + j) * 1000003;
  c.iall_gather(g.data(), parts)->wait();
  bool ok = true;
  for (size_t i = 0; i < total; ++i) ok &= g[i] == int32_t(i) * 1000003;
  check(ok, name + " int32 all_gather", me);
  if (n > 1) {
    std::vector<int32_t> out(3, 1 << 30 | me), in(3, -1);
    auto rq = c.irecv(in.data(), 3, (me + n - 1) % n, 6);
    c.send(out.data(), 3, (me + 1) % n, 6);
    rq->wait();
    check(in[2] == (1 << 30 | ((me + n - 1) % n)), name + " int32 send/irecv ring", me);
  }
}

// A call with a dtype it cannot take throws std::invalid_argument naming both dtypes, on every
// rank, before it communicates (so the group stays in step).
void test_dtype_errors(MpiCommunicator& c, const std::string& name) {
  const int me = c.rank();
  auto throws = [&](auto&& f, const std::vector<std::string>& words, const std::string& what) {
    std::string msg;
    try {
      f();
    } catch (const std::invalid_argument& e) {
      msg = e.what();
    }
    bool ok = !msg.empty();
    for (const auto& w : words) ok &= msg.find(w) != std::string::npos;
    check(ok, name + " " + what + " throws (" + msg + ")", me);
  };
  std::vector<bf16> sb(size_t(c.size()));
  std::vector<fp16> rh(1);
  std::vector<int32_t> i32(4);
  const std::vector<size_t> ones(size_t(c.size()), 1);
  throws([&] { c.reduce_scatter(sb.data(), rh.data(), ones); }, {"reduce_scatter", "bf16", "fp16"},
         "reduce_scatter bf16 -> fp16");
  throws([&] { c.ireduce_scatter(sb.data(), rh.data(), ones)->wait(); }, {"bf16", "fp16"},
         "ireduce_scatter bf16 -> fp16");
  throws([&] { c.all_reduce(i32.data(), 4, ReduceOp::Sum); }, {"all_reduce", "int32"}, "all_reduce int32");
  throws([&] { c.iall_reduce(i32.data(), 4, ReduceOp::Max)->wait(); }, {"int32"}, "iall_reduce int32");
}

// Rounding of a bf16 sum over two ranks (one combine, so both ways round once, to nearest even):
// 1 + 2^-8 is halfway between 1 and 1 + 2^-7 and rounds to 1; 1 + 3 * 2^-8 rounds up to 1 + 2^-6.
void test_bf16_rounding(MpiCommunicator& pair, const std::string& name) {
  const int me = pair.rank();
  std::vector<bf16> b = {bf16(me == 0 ? 1.0f : 0.00390625f), bf16(me == 0 ? 1.0f : 0.01171875f)};
  pair.all_reduce(b.data(), 2, ReduceOp::Sum);
  check(float(b[0]) == 1.0f && float(b[1]) == 1.015625f, name + " bf16 sum rounds to nearest even", me);
}

// GradBuckets over a bf16 gradient buffer, sharded and not: buckets reduce in bf16 and the
// shard buffer is bf16.
void test_grad_buckets_bf16(MpiCommunicator& c, const std::string& name) {
  const int n = c.size(), me = c.rank();
  const size_t total = 1003;
  for (bool sharded : {false, true}) {
    auto grads = filled<bf16>(total, sum_val, me);
    std::vector<std::vector<bf16>> shards;
    BucketPlan plan = plan_bucket_shards(total, plan_buckets(total, 100, {}), sharded, n, me);
    GradBuckets gb(c, loom::TypedPtr(grads.data()), plan, [&](DType t, size_t k) {
      check(t == DType::bf16, name + " GradBuckets allocates its shard in bf16", me);
      shards.emplace_back(k);
      return loom::TypedPtr(shards.back().data());
    });
    gb.grads_ready_from(500);
    gb.finish();
    const loom::TypedPtr owned = gb.owned_grads_typed();
    bool ok = owned.dtype == DType::bf16;
    size_t k = 0;
    for (const Range& r : gb.plan().owned)
      for (size_t i = r.begin; i < r.end; ++i, ++k) ok &= float(owned.as<bf16>()[k]) == float(i % 5 + 1) * weights(n);
    check(ok, name + " GradBuckets bf16" + (sharded ? " sharded" : ""), me);
    // The owned parts all-gathered into a bf16 buffer of the gradient's layout.
    std::vector<bf16> full(total, bf16(-1.0f));
    k = 0;
    for (const Range& r : gb.plan().owned)
      for (size_t i = r.begin; i < r.end; ++i) full[i] = owned.as<bf16>()[k++];
    gb.all_gather_parts(full.data());
    ok = true;
    for (size_t i = 0; i < total; ++i) ok &= float(full[i]) == float(i % 5 + 1) * weights(n);
    check(ok, name + " all_gather_parts bf16" + (sharded ? " sharded" : ""), me);
  }
}

// visit_gathered: every element of a buffer whose parts the ranks hold packed (sharded) or
// whole, once, in ascending pieces that tile it, none larger than a bucket (sharded) or
// kVisitPieceElems (whole); `fetch` asked only for this rank's parts, at their packed offsets.
void test_visit_gathered(MpiCommunicator& c, const std::string& name) {
  const int n = c.size(), me = c.rank();
  const auto want = [](size_t i) { return float(i % 1013) + 0.5f; };
  for (size_t total : {size_t(0), size_t(1), size_t(1003), kVisitPieceElems + 7}) {
    for (bool sharded : {false, true}) {
      const std::string tag = name + " visit_gathered " + std::to_string(total) + (sharded ? " sharded" : "");
      const size_t bucket = 100;
      BucketPlan plan = plan_bucket_shards(total, total ? plan_buckets(total, bucket, {total / 2}) : std::vector<Range>{},
                                           sharded, n, me);
      std::vector<float> packed(plan.owned_size);
      size_t k = 0;
      for (const Range& r : plan.owned)
        for (size_t i = r.begin; i < r.end; ++i) packed[k++] = want(i);
      bool fetch_ok = true, ok = true;
      size_t next = 0, largest = 0;
      visit_gathered(
          c, plan, total,
          [&](Range part, size_t at, float* dst) {
            fetch_ok &= at + part.size() <= packed.size();
            for (size_t i = 0; i < part.size() && fetch_ok; ++i) {
              fetch_ok &= packed[at + i] == want(part.begin + i);
              dst[i] = packed[at + i];
            }
          },
          [&](size_t begin, size_t count, const float* data) {
            ok &= begin == next && count > 0;
            for (size_t i = 0; i < count; ++i) ok &= data[i] == want(begin + i);
            next = begin + count;
            largest = std::max(largest, count);
          });
      check(fetch_ok, tag + ": fetch asked for this rank's parts at their packed offsets", me);
      check(ok && next == total, tag + ": ascending pieces tile the buffer with every element", me);
      check(largest <= (sharded ? bucket : kVisitPieceElems), tag + ": no piece larger than a bucket", me);
    }
  }
}

// Everything typed, each way MPI reduces 16-bit floats.
void test_all_typed(MpiCommunicator& c, const std::string& name) {
  for (HalfReduce how : {HalfReduce::UserOp, HalfReduce::ThroughFp32}) {
    c.set_half_reduce(how);
    const std::string tag = name + " [" + half_reduce_name(how) + "]";
    test_typed<bf16>(c, tag);
    test_typed<fp16>(c, tag);
    test_grad_buckets_bf16(c, tag);
  }
  c.set_half_reduce(kDefaultHalfReduce);
  test_int32(c, name);
  test_dtype_errors(c, name);
  test_visit_gathered(c, name);
  c.barrier();
}
}  // namespace

// use_nccl's local half (device, ids) is agreed over the world: rank 5 asks for a device no node
// has, and every rank must throw that one error instead of leaving the members of rank 5's groups
// waiting in their id's broadcast. Where rank 0's device 0 is usable the error names rank 5;
// on a machine without a GPU (or a build without NCCL) every rank fails alike, unprefixed. Either
// way no rank may hang, and the device groups still run over MPI afterwards.
void test_nccl_setup_failure(ProcessGroups& groups, int me) {
  const int bad = groups.layout().world() > 5 ? 5 : groups.layout().world() - 1;
  std::string msg;
  try {
    groups.use_nccl(me == bad ? 1000 : 0, nullptr);
  } catch (const std::exception& e) {
    msg = e.what();
  }
  check(!msg.empty(), "use_nccl with a bad device on rank " + std::to_string(bad) + " throws on every rank", me);
  check(msg.find("NCCL set-up: ") != std::string::npos, "the use_nccl error says NCCL set-up: " + msg, me);
  const bool names_a_rank = msg.rfind("rank ", 0) == 0;
  check(!names_a_rank || msg.rfind("rank " + std::to_string(bad) + ": NCCL set-up: cudaSetDevice(1000)", 0) == 0,
        "a use_nccl error that names a rank names rank " + std::to_string(bad) + ": " + msg, me);
  float one = 1;
  groups.device_dp().all_reduce(&one, 1, ReduceOp::Sum);
  check(one == float(groups.layout().dp), "the device dp group still reduces over MPI after the failed use_nccl", me);
}

int main(int argc, char** argv) {
  MpiWorld world(&argc, &argv);
  {
    MpiCommunicator w(world.comm());
    test_collectives(w, "world");
    test_all_typed(w, "world");
    if (w.size() >= 2) {  // ranks 0 and 1 as a group of two
      MPI_Comm two = MPI_COMM_NULL;
      MPI_Comm_split(world.comm(), w.rank() < 2 ? 0 : MPI_UNDEFINED, w.rank(), &two);
      if (two != MPI_COMM_NULL) {
        MpiCommunicator pair(two, "pair");
        for (HalfReduce how : {HalfReduce::UserOp, HalfReduce::ThroughFp32}) {
          pair.set_half_reduce(how);
          test_bf16_rounding(pair, std::string("pair [") + half_reduce_name(how) + "]");
        }
        MPI_Comm_free(&two);
      }
    }
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
      test_all_typed(groups.tp(), "tp group");
      test_all_typed(groups.dp(), "dp group");
      test_nccl_setup_failure(groups, me);
    }
  }
  return loom::test::tally_exit();
}
