#pragma once
// A short timed probe of a data-parallel group's link for parallel.bucket_mb: auto
// (bucket_sizing.hpp): the collective the gradient buckets use, at a few message sizes, fitted to
// alpha + bytes / beta. Collective over `group` and `host` (the same ranks; `host` reaches host
// memory, for the timings): every rank gets the same bits, because each size's time is the
// slowest rank's (a Max all-reduce, exact) and the fit is deterministic.
#include <cstddef>
#include <functional>
#include <vector>

#include "parallel/bucket_sizing.hpp"
#include "parallel/communicator.hpp"

namespace loom::parallel {

struct LinkProbe {
  LinkModel link;
  std::vector<std::pair<double, double>> samples;  // (bytes, seconds): each size's best repeat, slowest rank
};

// Times `reduce_scatter ? reduce-scatter : all-reduce` (Sum) of `bytes_sizes` bytes of `buf`'s
// dtype on `group`, `repeats` times each after one warm-up call, keeping the fastest repeat of
// each size. `buf` holds at least twice the largest size (its contents are overwritten); `sync`
// waits for the group's work to be done (a device stream; nothing for MPI).
LinkProbe probe_link(Communicator& group, Communicator& host, TypedPtr buf, bool reduce_scatter,
                     const std::vector<size_t>& bytes_sizes, int repeats, const std::function<void()>& sync);

}  // namespace loom::parallel
