#include "parallel/comm_volume.hpp"

#include <cstdio>
#include <numeric>
#include <stdexcept>

namespace loom::parallel {
namespace {
uint64_t sum(const std::array<uint64_t, kCommKinds>& a) { return std::accumulate(a.begin(), a.end(), uint64_t(0)); }

// Every part but `rank`'s, in bytes.
uint64_t all_but_own(const std::vector<size_t>& counts, size_t elem, int rank) {
  if (rank < 0 || size_t(rank) >= counts.size())
    throw std::invalid_argument("comm volume: rank " + std::to_string(rank) + " of a group of " +
                                std::to_string(counts.size()) + " parts");
  const uint64_t total = std::accumulate(counts.begin(), counts.end(), uint64_t(0));
  return (total - counts[size_t(rank)]) * elem;
}
}  // namespace

const char* comm_kind_name(CommKind k) {
  switch (k) {
    case CommKind::AllReduce: return "all_reduce";
    case CommKind::ReduceScatter: return "reduce_scatter";
    case CommKind::AllGather: return "all_gather";
    case CommKind::Broadcast: return "broadcast";
    case CommKind::SendRecv: return "send_recv";
  }
  return "?";
}

uint64_t CommVolume::total_payload() const { return sum(payload); }
uint64_t CommVolume::total_wire() const { return sum(wire); }
uint64_t CommVolume::total_calls() const { return sum(calls); }

CommVolume& CommVolume::operator+=(const CommVolume& o) {
  for (size_t k = 0; k < kCommKinds; ++k) {
    payload[k] += o.payload[k];
    wire[k] += o.wire[k];
    calls[k] += o.calls[k];
  }
  return *this;
}

CommVolume& CommVolume::operator-=(const CommVolume& o) {
  for (size_t k = 0; k < kCommKinds; ++k) {
    payload[k] -= o.payload[k];
    wire[k] -= o.wire[k];
    calls[k] -= o.calls[k];
  }
  return *this;
}

std::string format_comm_volume(const CommVolume& v) {
  std::string out;
  char line[160];
  for (size_t k = 0; k < kCommKinds; ++k) {
    if (v.calls[k] == 0) continue;
    std::snprintf(line, sizeof line, "%s%s %.2f MB (%llu calls, wire %.2f MB)", out.empty() ? "" : ", ",
                  comm_kind_name(CommKind(k)), double(v.payload[k]) / 1e6, (unsigned long long)v.calls[k],
                  double(v.wire[k]) / 1e6);
    out += line;
  }
  if (out.empty()) return "none";
  std::snprintf(line, sizeof line, "; wire %.2f MB", double(v.total_wire()) / 1e6);
  return out + line;
}

uint64_t ring_all_reduce_bytes(size_t n, size_t elem, int p, int rank) {
  if (p < 1 || rank < 0 || rank >= p)
    throw std::invalid_argument("comm volume: rank " + std::to_string(rank) + " of a group of " + std::to_string(p));
  // This rank's part of even_counts(n, p): n / p, one more for the first n % p ranks.
  const uint64_t own = n / size_t(p) + (size_t(rank) < n % size_t(p) ? 1 : 0);
  return 2 * (uint64_t(n) - own) * elem;
}

uint64_t ring_reduce_scatter_bytes(const std::vector<size_t>& counts, size_t elem, int rank) {
  return all_but_own(counts, elem, rank);
}

uint64_t ring_all_gather_bytes(const std::vector<size_t>& counts, size_t elem, int rank) {
  return all_but_own(counts, elem, rank);
}

uint64_t ring_broadcast_bytes(size_t n, size_t elem, int p, int rank, int root) {
  return p > 1 && rank != root ? uint64_t(n) * elem : 0;
}

}  // namespace loom::parallel
