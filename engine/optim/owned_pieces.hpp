#pragma once
// The pieces of the parameter tensors that a rank's owned ranges of the flat buffer cover: what
// the optimizer updates (each piece with its tensor's weight decay) and what the gradient norm
// sums (each piece once, by the rank the tensor's tp split and tie say counts it).
#include <algorithm>
#include <vector>

#include "engine/model/param_table.hpp"
#include "parallel/range.hpp"

namespace loom {

// Calls f(p, lo, hi, packed) for each non-empty overlap [lo, hi) of an owned range and tensor p,
// in range order and table order; `packed` is lo's position in the ranges' packed layout (the
// layout of a gradient shard and of the optimizer moments).
template <typename F>
void for_each_owned_piece(const std::vector<parallel::Range>& owned, const ParamTable& table, F&& f) {
  size_t packed = 0;
  for (const parallel::Range& r : owned) {
    for (const ParamInfo& p : table.params()) {
      const size_t lo = std::max(r.begin, p.offset), hi = std::min(r.end, p.offset + p.numel);
      if (lo < hi) f(p, lo, hi, packed + (lo - r.begin));
    }
    packed += r.size();
  }
}

}  // namespace loom
