#pragma once
// Ring all-reduce over MPI point-to-point, for host buffers: a reduce-scatter then an all-gather
// around the ring rank -> rank + 1, each of the 2(p-1) steps cut into segments and pipelined; and
// the reduce-scatter alone (ring_reduce_scatter, at the end).
//
// The buffer of n elements is split into p chunks (even_counts: sizes differ by at most one). In
// reduce-scatter step s (0 <= s < p-1) rank r sends chunk (r - s) mod p to r + 1 and receives
// chunk (r - s - 1) mod p from r - 1 into a scratch slot, which it combines into its own copy:
// after p-1 steps rank r holds chunk (r + 1) mod p reduced over every rank. The all-gather's p-1
// steps pass the reduced chunks on, received straight into the buffer.
//
// Pipelining: each chunk is cut into segments of RingOptions::segment_bytes; a segment moves on
// to the next step as soon as it has arrived (and, in reduce-scatter, been combined), without
// waiting for the rest of its chunk. Up to `in_flight` receives and `in_flight` sends are posted
// at once, so while this rank combines one segment the next ones are on the wire in both
// directions. Each rank sends and receives 2(p-1)/p * n elements: the bus-bandwidth optimum.
//
// Numerics: element i of chunk c is combined in the fixed order of the ring (starting from rank
// c's value, then c-1's, ...), whatever the timing; the owner's result is copied to every rank. So
// every rank gets bitwise the same result, and a run repeated with the same n and p gives bitwise
// the same result. The order differs from MPI_Allreduce's, so the two differ in float rounding.
// bf16/fp16: HalfReduce::UserOp rounds after each combine (p-1 roundings, like MPI's user op);
// ThroughFp32 widens the buffer into an fp32 scratch, runs the fp32 ring (twice the bytes) and
// rounds once. Max keeps the larger operand bit for bit (NaN wins), in every dtype.
#include <mpi.h>

#include <cstddef>
#include <vector>

#include "parallel/communicator.hpp"
#include "parallel/mpi_half_reduce.hpp"

namespace loom::parallel {

// Segment size and segments in flight, by measurement (default_ring_options() in
// ring_allreduce.cpp says why these).
struct RingOptions {
  size_t segment_bytes = size_t(60) << 10;
  int in_flight = 8;  // receives posted ahead, and sends outstanding, at most (each direction)
};
// The defaults across nodes (the struct's: segments TCP sends eagerly) and, where every rank of
// the group shares one node, for shared memory (256 KiB x 4). Numerics do not depend on them.
RingOptions default_ring_options(bool within_one_node = false);

// In place: buf (n elements: fp32, bf16 or fp16) becomes the reduction over `comm`. Collective
// over `comm`, which must carry nothing else while it runs (its messages use tag 0): give it a
// communicator of its own (MPI_Comm_dup). n = 0 and a group of one return at once.
void ring_all_reduce(MPI_Comm comm, TypedPtr buf, size_t n, ReduceOp op, HalfReduce how,
                     const RingOptions& o = default_ring_options());

// The reduce-scatter half alone, out of place, as Communicator::reduce_scatter: send holds
// sum(counts) elements laid out rank by rank (counts may differ and may be 0), and recv
// (counts[rank]) becomes the sum of every rank's part `rank`; send is not written. Its p-1 steps
// run one chunk later than the all-reduce's, so that rank r ends with part r. The parts go
// through the ring in rounds of a bounded work buffer (kRingRoundBytes, or more where two
// windows of segments per part need more) rather than a copy of the whole message: MPI_Reduce_
// scatter's own ring (Open MPI 4.1's choice for messages above 256 KiB) allocates one as large
// as the message. Sums only. Numerics as the all-reduce's: element i of part c is combined in the
// ring's fixed order (from rank c+1's value around to rank c's), whatever the timing or the
// segments, so a repeated call gives the same bits. Same communicator rules as ring_all_reduce.
constexpr size_t kRingRoundBytes = size_t(4) << 20;
void ring_reduce_scatter(MPI_Comm comm, ConstTypedPtr send, TypedPtr recv, const std::vector<size_t>& counts,
                         HalfReduce how, const RingOptions& o = default_ring_options());

// The elements of every part one round of ring_reduce_scatter takes (its work buffer holds p of
// them), for a largest part of `largest` elements reduced in the `work` dtype (fp32 where halves
// are reduced through fp32).
size_t ring_round_elems(size_t largest, int p, DType work, const RingOptions& o);
// What a ring_reduce_scatter call allocates while it runs (bytes): the round's work buffer and
// ring_core's receive slots. loom plan counts it at ZeRO-2/3, whose reduce-scatters run during
// the backward pass.
size_t ring_reduce_scatter_scratch_bytes(size_t largest, int p, DType work, const RingOptions& o);

}  // namespace loom::parallel
