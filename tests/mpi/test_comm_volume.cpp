// CountingCommunicator over MpiCommunicator: every collective, blocking and not, at fp32, bf16
// and int32 (where it moves data), on sizes 0, 1, 7 and 4097 with even and uneven parts. Each
// call must
//   - give bitwise the result the inner communicator gives for the same input (it forwards),
//   - count exactly one call of its kind, the payload bytes, and the ring model's wire bytes
//     (parallel/comm_volume.hpp), computed here from even_counts and the parts independently,
//   - and, summed over the group, wire bytes of 2(p-1) B (all-reduce) or (p-1) B (the others).
// A group of one counts payload and no wire bytes; a call that throws counts nothing;
// ProcessGroups' device_*() count, its host accessors do not. Run under mpirun; prints
// "N passed, M failed" on rank 0 and exits non-zero on any failure (on any rank).
#include <mpi.h>

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <numeric>
#include <stdexcept>
#include <string>
#include <vector>

#include "parallel/bucket_plan.hpp"  // even_counts
#include "parallel/counting_communicator.hpp"
#include "parallel/mpi_world.hpp"
#include "tests/mpi/mpi_tally.hpp"
#include "parallel/process_groups.hpp"

using namespace loom::parallel;
using loom::bf16;
using loom::DType;
using loom::dtype_name;
using loom::dtype_size;

namespace {
using loom::test::check;

// One call of kind k.
CommVolume one_call(CommKind k, uint64_t payload, uint64_t wire) {
  CommVolume v;
  v.payload[size_t(k)] = payload;
  v.wire[size_t(k)] = wire;
  v.calls[size_t(k)] = 1;
  return v;
}
// Exact: "all_reduce 1 calls 28/24 B" (payload/wire) for each kind with calls.
std::string bytes_of(const CommVolume& v) {
  std::string s;
  for (size_t k = 0; k < kCommKinds; ++k)
    if (v.calls[k] || v.payload[k] || v.wire[k])
      s += std::string(s.empty() ? "" : ", ") + comm_kind_name(CommKind(k)) + " " + std::to_string(v.calls[k]) +
           " calls " + std::to_string(v.payload[k]) + "/" + std::to_string(v.wire[k]) + " B";
  return s.empty() ? "none" : s;
}
void check_volume(const CommVolume& got, const CommVolume& want, const std::string& what, int rank) {
  check(got == want, what + ": counted " + bytes_of(got) + ", want " + bytes_of(want) + " (payload/wire)", rank);
}
// The group's sum of this rank's wire bytes of kind k.
uint64_t group_wire(const CommVolume& v, CommKind k, MPI_Comm comm) {
  unsigned long long mine = v.wire_bytes(k), all = 0;
  MPI_Allreduce(&mine, &all, 1, MPI_UNSIGNED_LONG_LONG, MPI_SUM, comm);
  return all;
}
size_t sum(const std::vector<size_t>& c) { return std::accumulate(c.begin(), c.end(), size_t(0)); }

// Small integers (exact in every dtype): rank r's element i.
template <typename T>
std::vector<T> filled(size_t n, int rank) {
  std::vector<T> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = T(float(int(i % 5) + rank % 2 + 1));
  return v;
}
template <typename T>
bool same_bytes(const std::vector<T>& a, const std::vector<T>& b) {
  return a.size() == b.size() && (a.empty() || std::memcmp(a.data(), b.data(), a.size() * sizeof(T)) == 0);
}

// Parts of `total` elements: even, or uneven with rank 1's empty.
std::vector<size_t> parts_of(size_t count, int n, bool even) {
  if (even) return even_counts(count, n);
  std::vector<size_t> c;
  for (int r = 0; r < n; ++r) c.push_back(r == 1 ? 0 : count + size_t(r) * 3);
  return c;
}

// The collectives at dtype T through `c` (counting, over `inner`), each against `inner` itself.
template <typename T>
void test_kinds(CountingCommunicator& c, MpiCommunicator& inner, const std::string& name) {
  const int n = c.size(), me = c.rank();
  const DType t = loom::dtype_of<T>;
  const uint64_t es = dtype_size(t);
  const bool reducible = t != DType::i32;
  for (size_t count : {size_t(0), size_t(1), size_t(7), size_t(4097)}) {
    for (bool nonblocking : {false, true}) {
      const std::string tag =
          name + " " + dtype_name(t) + " count " + std::to_string(count) + (nonblocking ? " (i)" : "");
      if (reducible) {
        auto got = filled<T>(count, me), want = got;
        CommVolume before = c.volume();
        if (nonblocking) c.iall_reduce(got.data(), count, ReduceOp::Sum)->wait();
        else c.all_reduce(got.data(), count, ReduceOp::Sum);
        const CommVolume d = c.volume() - before;
        inner.all_reduce(want.data(), count, ReduceOp::Sum);
        check(same_bytes(got, want), "all_reduce result " + tag, me);
        const uint64_t own = even_counts(count, n)[size_t(me)];
        check_volume(d, one_call(CommKind::AllReduce, count * es, 2 * (count - own) * es), "all_reduce " + tag, me);
        check(group_wire(d, CommKind::AllReduce, inner.comm()) == 2 * uint64_t(n - 1) * count * es,
              "all_reduce group wire 2(p-1)B " + tag, me);
      }
      for (bool even : {true, false}) {
        const auto parts = parts_of(count, n, even);
        const size_t total = sum(parts), mine = parts[size_t(me)];
        size_t off = 0;
        for (int r = 0; r < me; ++r) off += parts[size_t(r)];
        const std::string ptag = tag + (even ? " even" : " uneven");
        if (reducible) {
          const auto in = filled<T>(total, me);
          std::vector<T> got(mine), want(mine);
          CommVolume before = c.volume();
          if (nonblocking) c.ireduce_scatter(in.data(), got.data(), parts)->wait();
          else c.reduce_scatter(in.data(), got.data(), parts);
          const CommVolume d = c.volume() - before;
          inner.reduce_scatter(in.data(), want.data(), parts);
          check(same_bytes(got, want), "reduce_scatter result " + ptag, me);
          check_volume(d, one_call(CommKind::ReduceScatter, total * es, (total - mine) * es),
                       "reduce_scatter " + ptag, me);
          check(group_wire(d, CommKind::ReduceScatter, inner.comm()) == uint64_t(n - 1) * total * es,
                "reduce_scatter group wire (p-1)B " + ptag, me);
        }
        std::vector<T> got(total, T(-1.0f));
        for (size_t j = 0; j < mine; ++j) got[off + j] = T(float((off + j) % 100));
        auto want = got;
        CommVolume before = c.volume();
        if (nonblocking) c.iall_gather(got.data(), parts)->wait();
        else c.all_gather(got.data(), parts);
        const CommVolume d = c.volume() - before;
        inner.all_gather(want.data(), parts);
        check(same_bytes(got, want), "all_gather result " + ptag, me);
        check_volume(d, one_call(CommKind::AllGather, total * es, (total - mine) * es), "all_gather " + ptag, me);
        check(group_wire(d, CommKind::AllGather, inner.comm()) == uint64_t(n - 1) * total * es,
              "all_gather group wire (p-1)B " + ptag, me);
      }
    }
    const std::string tag = name + " " + dtype_name(t) + " count " + std::to_string(count);
    const int root = n - 1;
    auto got = filled<T>(count, me), want = got;
    CommVolume before = c.volume();
    c.broadcast(got.data(), count, root);
    const CommVolume d = c.volume() - before;
    inner.broadcast(want.data(), count, root);
    check(same_bytes(got, want), "broadcast result " + tag, me);
    check_volume(d, one_call(CommKind::Broadcast, count * es, me == root ? 0 : count * es), "broadcast " + tag, me);
    check(group_wire(d, CommKind::Broadcast, inner.comm()) == uint64_t(n - 1) * count * es,
          "broadcast group wire (p-1)B " + tag, me);
  }
  if (n > 1) {  // a ring, blocking (even ranks send first) and not: each rank sends 5, receives 5
    const int next = (me + 1) % n, prev = (me + n - 1) % n;
    const auto out = filled<T>(5, me);
    std::vector<T> in(5, T(-1.0f));
    CommVolume before = c.volume();
    if (me % 2 == 0) {
      c.send(out.data(), 5, next, 4);
      c.recv(in.data(), 5, prev, 4);
    } else {
      c.recv(in.data(), 5, prev, 4);
      c.send(out.data(), 5, next, 4);
    }
    CommVolume d = c.volume() - before;
    CommVolume want = one_call(CommKind::SendRecv, 5 * es, 0) + one_call(CommKind::SendRecv, 5 * es, 5 * es);
    check(same_bytes(in, filled<T>(5, prev)), name + " " + dtype_name(t) + " send/recv result", me);
    check_volume(d, want, name + " " + dtype_name(t) + " send/recv", me);
    in.assign(5, T(-1.0f));
    before = c.volume();
    auto rq = c.irecv(in.data(), 5, prev, 5);
    auto sq = c.isend(out.data(), 5, next, 5);
    d = c.volume() - before;  // counted when posted
    rq->wait();
    sq->wait();
    check(same_bytes(in, filled<T>(5, prev)), name + " " + dtype_name(t) + " isend/irecv result", me);
    check_volume(d, want, name + " " + dtype_name(t) + " isend/irecv (counted when posted)", me);
  }
  inner.barrier();
}

// A group of one: payload counted, nothing on the wire (self send/recv included).
void test_group_of_one(int me) {
  MpiCommunicator self(MPI_COMM_SELF, "self");
  CountingCommunicator c(self);
  std::vector<float> b(100, 1.0f);
  const std::vector<size_t> all = {100};
  c.all_reduce(b.data(), 100, ReduceOp::Sum);
  c.iall_reduce(b.data(), 100, ReduceOp::Max)->wait();
  c.reduce_scatter(b.data(), b.data() + 50, {50});
  c.all_gather(b.data(), all);
  c.broadcast(b.data(), 100, 0);
  auto rq = c.irecv(b.data(), 10, 0, 1);
  c.isend(b.data() + 50, 10, 0, 1)->wait();
  rq->wait();
  const CommVolume v = c.volume();
  check(v.total_wire() == 0, "group of one: no wire bytes (" + bytes_of(v) + ")", me);
  check(v.total_payload() == 4 * (200 + 50 + 100 + 100 + 20) && v.total_calls() == 7,
        "group of one: payload of 7 calls counted", me);
}

// A call the inner communicator refuses counts nothing; formatting and arithmetic.
void test_refused_and_format(CountingCommunicator& c, int me) {
  const CommVolume before = c.volume();
  std::vector<int32_t> i32(4);
  bool threw = false;
  try {
    c.all_reduce(i32.data(), 4, ReduceOp::Sum);
  } catch (const std::invalid_argument&) {
    threw = true;
  }
  check(threw && c.volume() == before, "a refused all_reduce (int32) throws and counts nothing", me);
  check(format_comm_volume(CommVolume{}) == "none", "format of nothing", me);
  const CommVolume v = one_call(CommKind::AllReduce, 3000000, 1500000) + one_call(CommKind::AllGather, 1000000, 500000);
  const std::string s = format_comm_volume(v);
  check(s == "all_reduce 3.00 MB (1 calls, wire 1.50 MB), all_gather 1.00 MB (1 calls, wire 0.50 MB); wire 2.00 MB",
        "format: " + s, me);
  check((v - one_call(CommKind::AllGather, 1000000, 500000)) == one_call(CommKind::AllReduce, 3000000, 1500000),
        "subtraction", me);
}

// ProcessGroups with every rank in one dp group (tp = pp = 1): device_*() count, host ones do not.
void test_process_groups(MPI_Comm world, int n, int me) {
  ProcessGroups g(world, GridLayout{1, n, 1});
  check(&g.device_dp() != static_cast<Communicator*>(&g.dp()) && g.device_dp().backend() == "mpi" &&
            g.device_dp().size() == n && g.device_dp().rank() == me && g.device_embedding() == nullptr,
        "process groups: device_dp() wraps dp(), no embedding group at pp 1", me);
  std::vector<float> b(1000, 1.0f);
  g.dp().all_reduce(b.data(), 1000, ReduceOp::Sum);  // host accessor: not counted
  check(g.device_volume() == CommVolume{}, "process groups: host dp() counts nothing", me);
  g.device_dp().all_reduce(b.data(), 1000, ReduceOp::Sum);
  g.device_tp().all_reduce(b.data(), 1000, ReduceOp::Sum);  // a group of one
  const uint64_t own = even_counts(1000, n)[size_t(me)];
  const CommVolume dp = one_call(CommKind::AllReduce, 4000, 2 * (1000 - own) * 4);
  check_volume(g.device_dp_volume(), dp, "process groups: device_dp_volume", me);
  check_volume(g.device_tp_volume(), one_call(CommKind::AllReduce, 4000, 0), "process groups: tp of one", me);
  check_volume(g.device_volume(), dp + one_call(CommKind::AllReduce, 4000, 0), "process groups: device_volume", me);
  check(g.device_pp_volume() == CommVolume{} && g.device_embedding_volume() == CommVolume{},
        "process groups: pp and embedding untouched", me);
}
}  // namespace

int main(int argc, char** argv) {
  MpiWorld world(&argc, &argv);
  {
    MpiCommunicator w(world.comm());
    CountingCommunicator c(w);
    test_kinds<float>(c, w, "world");
    test_kinds<bf16>(c, w, "world");
    test_kinds<int32_t>(c, w, "world");
    test_group_of_one(w.rank());
    test_refused_and_format(c, w.rank());
    test_process_groups(world.comm(), w.size(), w.rank());
  }
  return loom::test::tally_exit();
}
