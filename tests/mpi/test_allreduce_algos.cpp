// MpiCommunicator's all-reduce algorithms (mpi, ring, hierarchical, auto) against the exact
// expected result: integer-valued inputs in fp32, bf16 and fp16 (both HalfReduce ways), Sum and
// Max, blocking and iall_reduce, sizes 0, 1, p-1, odd sizes, sizes that leave a short last
// segment, and a few MB at the default segment size; hierarchical with faked nodes (ranks_per_node
// 1, 2, 3: at np 3 and 2 per node that is uneven nodes 2 + 1) and the real ones (one host: one
// node). Then Auto's choice by size, and determinism: a non-integer input reduced twice gives
// bitwise the same result, and the same on every rank. Guard elements after each buffer must
// stay untouched. Run under mpirun; prints "N passed, M failed" on rank 0 and exits non-zero on
// any failure (on any rank).
#include <mpi.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "parallel/mpi_communicator.hpp"
#include "parallel/mpi_world.hpp"
#include "tests/mpi/mpi_tally.hpp"

using namespace loom::parallel;
using loom::bf16;
using loom::DType;
using loom::dtype_name;
using loom::fp16;

namespace {
using loom::test::check;

// Sum inputs: (rank + 1) * (i % 5 + 1), sums at most 5 p (p + 1) / 2: exact in bf16 for p <= 8.
float sum_val(size_t i, int r) { return float((r + 1) * int(i % 5 + 1)); }
// Max inputs: small signed integers whose maximum moves between ranks.
float max_val(size_t i, int r) { return float(int((i * 3 + size_t(r) * 5) % 11) - 5); }

constexpr size_t kGuard = 8;
constexpr float kGuardValue = -96.0f;  // exact in bf16 and fp16, never a result here

// A buffer of n elements of dtype t plus kGuard guard elements, read and written as floats.
struct Buf {
  DType t;
  std::vector<char> b;
  Buf(DType t_, size_t n) : t(t_), b((n + kGuard) * loom::dtype_size(t_)) {}
  void set(size_t i, float v) {
    if (t == DType::f32) reinterpret_cast<float*>(b.data())[i] = v;
    else if (t == DType::bf16) reinterpret_cast<bf16*>(b.data())[i] = bf16(v);
    else reinterpret_cast<fp16*>(b.data())[i] = fp16(v);
  }
  float get(size_t i) const {
    if (t == DType::f32) return reinterpret_cast<const float*>(b.data())[i];
    if (t == DType::bf16) return float(reinterpret_cast<const bf16*>(b.data())[i]);
    return float(reinterpret_cast<const fp16*>(b.data())[i]);
  }
  loom::TypedPtr ptr() { return loom::TypedPtr(b.data(), t); }
};

// One all-reduce of n elements, checked element by element (first bad index reported).
void run_one(MpiCommunicator& c, const std::string& name, DType t, size_t n, ReduceOp op, bool nonblocking) {
  const int p = c.size(), me = c.rank();
  Buf buf(t, n);
  for (size_t i = 0; i < n; ++i) buf.set(i, op == ReduceOp::Sum ? sum_val(i, me) : max_val(i, me));
  for (size_t g = 0; g < kGuard; ++g) buf.set(n + g, kGuardValue);
  if (nonblocking) c.iall_reduce(buf.ptr(), n, op)->wait();
  else c.all_reduce(buf.ptr(), n, op);
  size_t bad = n;
  for (size_t i = 0; i < n && bad == n; ++i) {
    float want = 0;
    if (op == ReduceOp::Sum) {
      want = float(i % 5 + 1) * float(p * (p + 1) / 2);
    } else {
      want = max_val(i, 0);
      for (int r = 1; r < p; ++r) want = std::max(want, max_val(i, r));
    }
    if (buf.get(i) != want) bad = i;
  }
  bool guard_ok = true;
  for (size_t g = 0; g < kGuard; ++g) guard_ok &= buf.get(n + g) == kGuardValue;
  const std::string tag = name + " " + dtype_name(t) + (op == ReduceOp::Sum ? " sum" : " max") + " n=" +
                          std::to_string(n) + (nonblocking ? " (i)" : "");
  check(bad == n, tag + (bad == n ? "" : " first bad index " + std::to_string(bad)), me);
  check(guard_ok, tag + " guard", me);
}

// Every dtype, op and small odd size under the communicator's current settings, with small
// segments (8 elements of fp32 or 16 of bf16: many segments, short last ones, windows wrapping).
void sweep(MpiCommunicator& c, const std::string& name) {
  const int p = c.size();
  c.set_ring_options(RingOptions{32, 3});
  for (DType t : {DType::f32, DType::bf16, DType::f16}) {
    for (HalfReduce how : {HalfReduce::UserOp, HalfReduce::ThroughFp32}) {
      if (t == DType::f32 && how == HalfReduce::ThroughFp32) continue;
      c.set_half_reduce(how);
      const std::string nm = name + (t == DType::f32 ? "" : std::string(" ") + half_reduce_name(how));
      for (size_t n : {size_t(0), size_t(1), size_t(p > 1 ? p - 1 : 2), size_t(7), size_t(61), size_t(1001)})
        for (ReduceOp op : {ReduceOp::Sum, ReduceOp::Max})
          for (bool nb : {false, true}) run_one(c, nm, t, n, op, nb);
    }
  }
  c.set_half_reduce(kDefaultHalfReduce);
  // A few MB at the default segment size, not a multiple of it or of p.
  c.set_ring_options(default_ring_options());
  run_one(c, name + " big", DType::f32, (size_t(5) << 20) / 4 + 5, ReduceOp::Sum, false);  // above kRingMinBytes
  run_one(c, name + " big", DType::bf16, (size_t(2) << 20) / 2 + 3, ReduceOp::Sum, true);
  run_one(c, name + " big", DType::f32, (size_t(1) << 20) + 7, ReduceOp::Max, true);
}

// One reduce-scatter of the parts `counts` (rank order), checked element by element: recv is
// every rank's part `me` summed, its guards untouched, and send unchanged (it is const).
void run_rs(MpiCommunicator& c, const std::string& name, DType t, const std::vector<size_t>& counts,
            bool nonblocking) {
  const int p = c.size(), me = c.rank();
  size_t total = 0, off = 0;
  for (int r = 0; r < p; ++r) {
    if (r < me) off += counts[size_t(r)];
    total += counts[size_t(r)];
  }
  const size_t mine = counts[size_t(me)];
  Buf send(t, total), recv(t, mine);
  for (size_t i = 0; i < total; ++i) send.set(i, sum_val(i, me));
  for (size_t g = 0; g < kGuard; ++g) send.set(total + g, kGuardValue);
  for (size_t i = 0; i < mine + kGuard; ++i) recv.set(i, kGuardValue);
  const std::vector<char> before = send.b;
  if (nonblocking) c.ireduce_scatter(send.ptr(), recv.ptr(), counts)->wait();
  else c.reduce_scatter(send.ptr(), recv.ptr(), counts);
  size_t bad = mine;
  for (size_t i = 0; i < mine && bad == mine; ++i)
    if (recv.get(i) != float((off + i) % 5 + 1) * float(p * (p + 1) / 2)) bad = i;
  bool guard_ok = true;
  for (size_t g = 0; g < kGuard; ++g) guard_ok &= recv.get(mine + g) == kGuardValue;
  std::string shape;
  for (size_t k : counts) {
    if (!shape.empty()) shape += ',';
    shape += std::to_string(k);
  }
  const std::string tag =
      name + " reduce_scatter " + dtype_name(t) + " [" + shape + "]" + (nonblocking ? " (i)" : "");
  check(bad == mine, tag + (bad == mine ? "" : " first bad index " + std::to_string(bad)), me);
  check(guard_ok, tag + " guard", me);
  check(send.b == before, tag + " send buffer unchanged", me);
}

// Reduce-scatter under the communicator's algorithm: even, uneven and empty parts with small
// segments, then parts large enough for several rounds of the ring's work buffer.
void sweep_rs(MpiCommunicator& c, const std::string& name) {
  const int p = c.size();
  c.set_ring_options(RingOptions{32, 3});
  std::vector<std::vector<size_t>> shapes = {std::vector<size_t>(size_t(p), 0), std::vector<size_t>(size_t(p), 1),
                                             std::vector<size_t>(size_t(p), 61)};
  std::vector<size_t> uneven(static_cast<size_t>(p));
  for (int r = 0; r < p; ++r) uneven[size_t(r)] = size_t(r % 3 == 1 ? 0 : 17 * r + 5);  // one part empty
  shapes.push_back(uneven);
  for (DType t : {DType::f32, DType::bf16, DType::f16}) {
    for (HalfReduce how : {HalfReduce::UserOp, HalfReduce::ThroughFp32}) {
      if (t == DType::f32 && how == HalfReduce::ThroughFp32) continue;
      c.set_half_reduce(how);
      const std::string nm = name + (t == DType::f32 ? "" : std::string(" ") + half_reduce_name(how));
      for (const auto& counts : shapes)
        for (bool nb : {false, true}) run_rs(c, nm, t, counts, nb);
    }
  }
  c.set_half_reduce(kDefaultHalfReduce);
  c.set_ring_options(default_ring_options());
  // Several rounds of kRingRoundBytes: parts of 3 MiB of fp32 (1.5 MiB of bf16), the last part
  // shorter, so the later rounds carry parts of unequal (and zero) length.
  std::vector<size_t> big(static_cast<size_t>(p), (size_t(3) << 20) / 4 + 3);
  big[size_t(p - 1)] = p > 1 ? (size_t(1) << 20) / 4 : big[0];
  run_rs(c, name + " big", DType::f32, big, false);
  c.set_half_reduce(HalfReduce::ThroughFp32);
  run_rs(c, name + " big", DType::bf16, big, true);
  c.set_half_reduce(kDefaultHalfReduce);
}

uint64_t fnv(const float* x, size_t n) {
  uint64_t h = 1469598103934665603ull;
  const unsigned char* b = reinterpret_cast<const unsigned char*>(x);
  for (size_t i = 0; i < n * sizeof(float); ++i) h = (h ^ b[i]) * 1099511628211ull;
  return h;
}

// A non-integer input reduced twice: bitwise the same both times (the second time with other
// ring segments: the segments split transfers, never the order of the additions), and on every rank.
void determinism(MpiCommunicator& c, const std::string& name, size_t n) {
  const int me = c.rank();
  uint64_t h[2];
  for (int rep = 0; rep < 2; ++rep) {
    c.set_ring_options(rep == 0 ? default_ring_options(false) : RingOptions{size_t(1) << 20, 2});
    std::vector<float> x(n);
    for (size_t i = 0; i < n; ++i) x[i] = std::sin(0.37f * float(i) + 1.3f * float(me)) * 1000.0f / float(i % 13 + 1);
    c.all_reduce(x.data(), n, ReduceOp::Sum);
    h[rep] = fnv(x.data(), n);
  }
  uint64_t lo = 0, hi = 0;
  MPI_Allreduce(&h[0], &lo, 1, MPI_UINT64_T, MPI_MIN, c.comm());
  MPI_Allreduce(&h[0], &hi, 1, MPI_UINT64_T, MPI_MAX, c.comm());
  check(h[0] == h[1], name + " determinism: repeated sum bitwise equal", me);
  check(lo == hi, name + " determinism: every rank has the same bits", me);
}

}  // namespace

int main(int argc, char** argv) {
  MpiWorld world(&argc, &argv);
  const int me = world.rank(), p = world.size();
  {
    MpiCommunicator c(world.comm());
    for (AllReduceAlgo a : {AllReduceAlgo::Mpi, AllReduceAlgo::Ring, AllReduceAlgo::Auto}) {
      c.set_all_reduce_algo(a);
      sweep(c, all_reduce_algo_name(a));
      sweep_rs(c, all_reduce_algo_name(a));
    }
    c.set_all_reduce_algo(AllReduceAlgo::Hierarchical);
    // 0: the real nodes (this host: one node, reduce + broadcast); 1: every rank its own node (the
    // plain ring); 2 and 3: several nodes of several ranks, uneven where p is not a multiple.
    for (int k : {0, 1, 2, 3}) {
      if (k > p) continue;
      c.set_ranks_per_node(k);
      sweep(c, "hierarchical ranks_per_node=" + std::to_string(k));
      if (k == 2) sweep_rs(c, "hierarchical ranks_per_node=2");
    }
    c.set_ranks_per_node(0);

    // Auto by size: MPI below kRingMinBytes, the ring from it; a group of one never rings.
    c.set_all_reduce_algo(AllReduceAlgo::Auto);
    const AllReduceAlgo big = p > 1 ? AllReduceAlgo::Ring : AllReduceAlgo::Mpi;
    check(c.resolved_all_reduce_algo(kRingMinBytes / 4 - 1, DType::f32) == AllReduceAlgo::Mpi, "auto small fp32", me);
    check(c.resolved_all_reduce_algo(kRingMinBytes / 4, DType::f32) == big, "auto at crossover fp32", me);
    check(c.resolved_all_reduce_algo(kRingMinBytes / 2, DType::bf16) == big, "auto at crossover bf16", me);
    check(c.resolved_all_reduce_algo(kRingMinBytes / 2 - 1, DType::bf16) == AllReduceAlgo::Mpi, "auto small bf16", me);
    check(auto_all_reduce_algo(size_t(1) << 30, 1) == AllReduceAlgo::Mpi, "auto group of one", me);
    check(auto_all_reduce_algo(kRingMinBytes, 2) == AllReduceAlgo::Ring, "auto 2 ranks", me);
    c.set_all_reduce_algo(AllReduceAlgo::Ring);
    check(c.resolved_all_reduce_algo(1, DType::f32) == AllReduceAlgo::Ring, "explicit ring stays ring", me);

    for (const char* s : {"auto", "mpi", "ring", "hierarchical"})
      check(std::strcmp(all_reduce_algo_name(parse_all_reduce_algo(s)), s) == 0, std::string("parse ") + s, me);
    bool threw = false;
    try {
      parse_all_reduce_algo("tree");
    } catch (const std::invalid_argument&) {
      threw = true;
    }
    check(threw, "parse rejects 'tree'", me);

    for (AllReduceAlgo a : {AllReduceAlgo::Mpi, AllReduceAlgo::Ring, AllReduceAlgo::Hierarchical}) {
      c.set_all_reduce_algo(a);
      c.set_ranks_per_node(2);
      determinism(c, all_reduce_algo_name(a), 300001);
    }
  }
  return loom::test::tally_exit();
}
