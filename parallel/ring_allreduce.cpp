#include "parallel/ring_allreduce.hpp"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <stdexcept>
#include <string>
#include <memory>
#include <vector>

#include "parallel/bucket_plan.hpp"  // even_counts
#include "parallel/mpi_check.hpp"

namespace loom::parallel {
namespace {

// One message of the ring: item t = step * S + segment of this rank's schedule.
struct Span {
  size_t off = 0, count = 0;  // elements
};

// The ring's schedule on this rank: which part of the buffer item t sends and receives.
// `counts`: the p chunks, in rank order. The all-reduce (gather, shift 0) runs p-1 reduce-scatter
// steps, after which rank r holds chunk r+1 reduced, and p-1 all-gather steps. A reduce-scatter
// alone (no gather, shift 1) runs the p-1 steps one chunk later, so that rank r ends with chunk r.
class RingSchedule {
 public:
  RingSchedule(const std::vector<size_t>& counts, int p, int r, size_t seg, bool gather, int shift)
      : p_(p), r_(r), shift_(shift), seg_(seg), counts_(counts) {
    size_t off = 0, largest = 0;
    for (size_t c : counts_) {
      offs_.push_back(off);
      off += c;
      largest = std::max(largest, c);
    }
    segs_ = (largest + seg - 1) / seg;
    items_ = size_t((gather ? 2 : 1) * (p - 1)) * segs_;
  }
  size_t items() const { return items_; }
  size_t segments() const { return segs_; }
  int step(size_t t) const { return int(t / segs_); }
  bool reducing(size_t t) const { return step(t) < p_ - 1; }  // reduce-scatter (else all-gather)
  Span sent(size_t t) const { return span(mod(r_ - step(t) - shift_), t % segs_); }
  Span received(size_t t) const { return span(mod(r_ - step(t) - 1 - shift_), t % segs_); }

 private:
  int mod(int x) const { return ((x % p_) + p_) % p_; }
  Span span(int chunk, size_t k) const {
    const size_t c = counts_[size_t(chunk)], begin = k * seg_;
    if (begin >= c) return {offs_[size_t(chunk)], 0};
    return {offs_[size_t(chunk)] + begin, std::min(seg_, c - begin)};
  }
  int p_, r_, shift_;
  size_t seg_, segs_ = 0, items_ = 0;
  std::vector<size_t> counts_, offs_;
};

// Elements of dtype t per ring segment.
size_t segment_elems(const RingOptions& o, DType t) { return std::max<size_t>(1, o.segment_bytes / dtype_size(t)); }

// The fp32/bf16/fp16 ring on raw elements of dtype t, in place over the chunks `counts` of `base`;
// Sum of halves rounds after each combine. gather: the all-reduce (every rank ends with every
// chunk reduced); otherwise the reduce-scatter alone (rank r ends with chunk r reduced; the other
// chunks hold partial sums).
void ring_core(MPI_Comm comm, char* base, const std::vector<size_t>& counts, DType t, ReduceOp op,
               const RingOptions& o, bool gather) {
  int p = 1, r = 0;
  MPI_Comm_size(comm, &p);
  MPI_Comm_rank(comm, &r);
  size_t n = 0;
  for (size_t c : counts) n += c;
  if (p == 1 || n == 0) return;
  const size_t es = dtype_size(t);
  const size_t seg = segment_elems(o, t);
  const int window = std::max(1, o.in_flight);
  const RingSchedule plan(counts, p, r, seg, gather, gather ? 0 : 1);
  const size_t T = plan.items(), S = plan.segments();
  const int right = (r + 1) % p, left = (r + p - 1) % p;
  const MPI_Datatype bytes = MPI_BYTE;

  // Requests: [0, window) receives, [window, 2 window) sends; item[] says which item each carries.
  std::vector<MPI_Request> req(size_t(2 * window), MPI_REQUEST_NULL);
  std::vector<size_t> item(size_t(2 * window), 0);
  // Reduce-scatter receives land in a scratch slot each (one per receive request).
  std::unique_ptr<char[]> scratch(new char[size_t(window) * seg * es]);
  std::vector<char> recv_done(T, 0), send_done(T, 0);
  size_t next_recv = 0, next_send = 0, finished = 0;
  int active_recv = 0, active_send = 0;

  while (finished < 2 * T) {
    // Receives, in item order. An all-gather receive overwrites the part of the buffer that the
    // reduce-scatter sent (p-1) steps earlier: that send must have completed.
    while (next_recv < T && active_recv < window) {
      const Span s = plan.received(next_recv);
      if (s.count == 0) {
        recv_done[next_recv++] = 1;
        ++finished;
        continue;
      }
      const bool rs = plan.reducing(next_recv);
      if (!rs && !send_done[next_recv - size_t(p - 1) * S]) break;
      int slot = 0;
      while (req[size_t(slot)] != MPI_REQUEST_NULL) ++slot;
      char* dst = rs ? scratch.get() + size_t(slot) * seg * es : base + s.off * es;
      mpi_check(MPI_Irecv(dst, mpi_count(s.count * es, "bytes"), bytes, left, 0, comm, &req[size_t(slot)]),
                "MPI_Irecv (ring)");
      item[size_t(slot)] = next_recv++;
      ++active_recv;
    }
    // Sends, in item order: a step's segment leaves once the previous step's has arrived.
    while (next_send < T && active_send < window) {
      if (next_send >= S && !recv_done[next_send - S]) break;
      const Span s = plan.sent(next_send);
      if (s.count == 0) {
        send_done[next_send++] = 1;
        ++finished;
        continue;
      }
      int slot = window;
      while (req[size_t(slot)] != MPI_REQUEST_NULL) ++slot;
      mpi_check(MPI_Isend(base + s.off * es, mpi_count(s.count * es, "bytes"), bytes, right, 0, comm,
                          &req[size_t(slot)]),
                "MPI_Isend (ring)");
      item[size_t(slot)] = next_send++;
      ++active_send;
    }
    if (active_recv + active_send == 0) continue;  // only empty items were retired
    int idx = MPI_UNDEFINED;
    mpi_check(MPI_Waitany(2 * window, req.data(), &idx, MPI_STATUS_IGNORE), "MPI_Waitany (ring)");
    if (idx == MPI_UNDEFINED) continue;
    const size_t it = item[size_t(idx)];
    ++finished;
    if (idx < window) {
      --active_recv;
      if (plan.reducing(it)) {
        const Span s = plan.received(it);
        combine_into(base + s.off * es, scratch.get() + size_t(idx) * seg * es, s.count, t, op);
      }
      recv_done[it] = 1;
    } else {
      --active_send;
      send_done[it] = 1;
    }
  }
}

}  // namespace

// Defaults: 60 KiB segments, 8 in flight. A segment stays below Open MPI's TCP eager limit
// (btl_tcp_eager_limit, 64 KiB including its header), so it leaves at once, with no rendezvous.
// Larger segments go through rendezvous, whose handshake messages queue behind this rank's own
// outgoing data in the socket buffer (megabytes: tens of ms at 1 Gbit); between 2 nodes, where
// both directions of one link carry data, that halved the ring. Measured with `loom bench comm
// --algo ring --segment-kib S --in-flight W`, 16 MB, network namespaces, 1 rank per node:
//   1 Gbit,  2 nodes: 256 KiB x 4: 54% of the link; 1 MiB x 2..8: 52-68%; 32/60 KiB x 2..16: 95%
//   1 Gbit,  4 nodes: 60 KiB x 4..8: 95%; 256 KiB x 4..8: 94%
//   10 Gbit, 2 nodes: 60 KiB x 8: 91-95%; 256 KiB x 4..8: 78-89%; 1 MiB: 58-69%
//   10 Gbit, 4 nodes: 45-66% whatever the settings (4 ranks on 2 cores: CPU-bound, noisy)
// Within one node (Open MPI's vader, no TCP) small segments only add per-message cost: one host,
// time per all-reduce against MPI_Allreduce's, 2 ranks: 4 MiB 809 us (60 KiB x 8) / 438 (256 KiB
// x 4) / 351 (MPI); 16 MiB 3697 / 3268 / 3026; 64 MiB 18.8 / 12.9 / 25.7 ms. 4 ranks: within
// noise of MPI at 4-16 MiB either way, 1.7-1.9x faster at 64 MiB.
RingOptions default_ring_options(bool within_one_node) {
  if (within_one_node) return RingOptions{size_t(256) << 10, 4};
  return RingOptions{};
}

void ring_all_reduce(MPI_Comm comm, TypedPtr buf, size_t n, ReduceOp op, HalfReduce how, const RingOptions& o) {
  check_reduce_dtype(buf.dtype, "ring_all_reduce");
  int p = 1;
  MPI_Comm_size(comm, &p);
  if (p == 1 || n == 0) return;
  if (buf.dtype == DType::f32 || how == HalfReduce::UserOp) {
    ring_core(comm, static_cast<char*>(buf.data), even_counts(n, p), buf.dtype, op, o, true);
    return;
  }
  // ThroughFp32: one rounding, at the end.
  std::unique_ptr<float[]> f(new float[n]);
  widen_to_fp32(buf, f.get(), n);
  ring_core(comm, reinterpret_cast<char*>(f.get()), even_counts(n, p), DType::f32, op, o, true);
  narrow_from_fp32(f.get(), buf, n);
}

size_t ring_round_elems(size_t largest, int p, DType work, const RingOptions& o) {
  const size_t window_elems = 2 * size_t(std::max(1, o.in_flight)) * segment_elems(o, work);
  return std::min(largest, std::max(window_elems, (kRingRoundBytes / size_t(std::max(1, p))) / dtype_size(work)));
}

size_t ring_reduce_scatter_scratch_bytes(size_t largest, int p, DType work, const RingOptions& o) {
  if (p <= 1 || largest == 0) return 0;
  const size_t es = dtype_size(work);
  return size_t(p) * ring_round_elems(largest, p, work, o) * es +
         size_t(std::max(1, o.in_flight)) * segment_elems(o, work) * es;  // ring_core's receive slots
}

void ring_reduce_scatter(MPI_Comm comm, ConstTypedPtr send, TypedPtr recv, const std::vector<size_t>& counts,
                         HalfReduce how, const RingOptions& o) {
  check_same_dtype(send.dtype, recv.dtype, "ring_reduce_scatter");
  int p = 1, r = 0;
  MPI_Comm_size(comm, &p);
  MPI_Comm_rank(comm, &r);
  if (int(counts.size()) != p)
    throw std::invalid_argument("ring_reduce_scatter: " + std::to_string(counts.size()) + " counts for " +
                                std::to_string(p) + " ranks");
  std::vector<size_t> offs(static_cast<size_t>(p), 0);
  size_t largest = 0;
  for (int c = 1; c < p; ++c) offs[size_t(c)] = offs[size_t(c - 1)] + counts[size_t(c - 1)];
  for (size_t c : counts) largest = std::max(largest, c);
  if (largest == 0) return;
  const DType t = send.dtype;
  const size_t es = dtype_size(t);
  if (p == 1) {
    std::memcpy(recv.data, send.data, counts[0] * es);
    return;
  }
  // The work dtype: the buffer's own, or fp32 for halves reduced through fp32 (one rounding, when
  // the round's part comes back). The work buffer holds one round: up to R elements of every
  // part, packed, reduce-scattered in place by the ring, then this rank's part copied out. R is
  // the larger of 4 MiB over the parts and two windows of segments (to keep the ring's pipeline
  // full), and never more than the largest part: a bounded scratch where MPI_Reduce_scatter's
  // ring (Open MPI 4.1) allocates one as large as the whole message.
  const DType wt = t == DType::f32 || how == HalfReduce::UserOp ? t : DType::f32;
  const size_t wes = dtype_size(wt);
  const size_t R = ring_round_elems(largest, p, wt, o);
  std::unique_ptr<char[]> work(new char[size_t(p) * R * wes]);
  std::vector<size_t> part(static_cast<size_t>(p));
  for (size_t lo = 0; lo < largest; lo += R) {
    size_t at = 0;
    for (int c = 0; c < p; ++c) {
      const size_t k = counts[size_t(c)] > lo ? std::min(R, counts[size_t(c)] - lo) : 0;
      part[size_t(c)] = k;
      const ConstTypedPtr src = send + (offs[size_t(c)] + lo);
      if (wt == t) std::memcpy(work.get() + at * wes, src.data, k * es);
      else widen_to_fp32(src, reinterpret_cast<float*>(work.get()) + at, k);
      at += k;
    }
    ring_core(comm, work.get(), part, wt, ReduceOp::Sum, o, false);
    size_t mine = 0;
    for (int c = 0; c < r; ++c) mine += part[size_t(c)];
    const TypedPtr dst = recv + lo;
    if (wt == t) std::memcpy(dst.data, work.get() + mine * wes, part[size_t(r)] * es);
    else narrow_from_fp32(reinterpret_cast<const float*>(work.get()) + mine, dst, part[size_t(r)]);
  }
}

}  // namespace loom::parallel
