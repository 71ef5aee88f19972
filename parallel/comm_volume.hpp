#pragma once
// Communication volume: bytes handed to the collectives of a group, and the bytes that moved
// into this rank under the ring model below, per collective kind. CountingCommunicator
// (counting_communicator.hpp) adds them up; a step's volume is (after - before).
//
// Two figures per kind:
//   payload  the buffer each call was handed, in bytes: all_reduce n; reduce_scatter and
//            all_gather sum(counts); broadcast n; send and recv n each (a rank's p2p payload is
//            what it sent plus what it received). Counted in groups of one too: what was asked.
//   wire     the bytes this rank receives when the collective runs as the bandwidth-optimal
//            ring (the algorithms behind nccl-tests' busbw factors), for a group of p ranks and
//            a payload of B bytes whose part r is this rank's own:
//              all_reduce      2 (B - own)  a ring reduce-scatter then a ring all-gather, over
//                                           the parts of even_counts(n, p) (bucket_plan.hpp)
//              reduce_scatter  B - own      own = counts[rank]: every other part arrives once,
//              all_gather      B - own      summed into (or copied beside) the rank's own
//              broadcast       B            on every rank but the root (a pipelined chain); 0 at the root
//              recv            B            (send: 0; the peer's recv counts those bytes)
//            A ring moves each byte from one rank to the next once, so summed over a group the
//            wire figure is the group's traffic: 2(p-1) B, (p-1) B, (p-1) B, (p-1) B, that is
//            p times busbw's factor; per rank it is also what the rank sends, within one part
//            (exactly, for even parts). A group of one receives nothing: 0.
// Wire bytes of different kinds add up; payloads do not compare across kinds (an all-reduce
// of B moves twice what an all-gather of B does). For P parameter bytes over dp ranks, ZeRO-0
// all-reduces the gradients once (payload P, wire 2 (P - P/dp)); ZeRO-3 all-gathers the
// parameters for forward and again for backward and reduce-scatters the gradients (payload
// 3P, wire 3 (P - P/dp)): 1.5 times ZeRO-0's wire bytes, when all three move one dtype.
//
// The model is the algorithm's, not the implementation's: Open MPI picks recursive doubling or
// a binomial tree for small messages and moves more or fewer bytes there; NCCL's rings and
// (for all-reduce) trees move the ring's bytes.
#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace loom::parallel {

enum class CommKind { AllReduce, ReduceScatter, AllGather, Broadcast, SendRecv };
constexpr size_t kCommKinds = 5;
// "all_reduce" | "reduce_scatter" | "all_gather" | "broadcast" | "send_recv"
const char* comm_kind_name(CommKind k);

struct CommVolume {
  // Indexed by CommKind. Bytes, and the number of calls.
  std::array<uint64_t, kCommKinds> payload{}, wire{}, calls{};

  uint64_t payload_bytes(CommKind k) const { return payload[size_t(k)]; }
  uint64_t wire_bytes(CommKind k) const { return wire[size_t(k)]; }
  uint64_t call_count(CommKind k) const { return calls[size_t(k)]; }
  uint64_t total_payload() const;
  uint64_t total_wire() const;
  uint64_t total_calls() const;

  CommVolume& operator+=(const CommVolume& o);
  // Element-wise; for a later snapshot of the same counters minus an earlier one.
  CommVolume& operator-=(const CommVolume& o);
  friend CommVolume operator+(CommVolume a, const CommVolume& b) { return a += b; }
  friend CommVolume operator-(CommVolume a, const CommVolume& b) { return a -= b; }
  bool operator==(const CommVolume& o) const { return payload == o.payload && wire == o.wire && calls == o.calls; }
  bool operator!=(const CommVolume& o) const { return !(*this == o); }
};

// One line, MB = 1e6 bytes, kinds without calls left out:
// "all_reduce 3.41 MB (12 calls, wire 3.41 MB), all_gather ...; wire 5.12 MB"; "none" if empty.
std::string format_comm_volume(const CommVolume& v);

// The ring model's wire bytes for this rank (`rank` of `p`), as above; `elem` is the dtype's size.
uint64_t ring_all_reduce_bytes(size_t n, size_t elem, int p, int rank);
uint64_t ring_reduce_scatter_bytes(const std::vector<size_t>& counts, size_t elem, int rank);
uint64_t ring_all_gather_bytes(const std::vector<size_t>& counts, size_t elem, int rank);
uint64_t ring_broadcast_bytes(size_t n, size_t elem, int p, int rank, int root);

}  // namespace loom::parallel
