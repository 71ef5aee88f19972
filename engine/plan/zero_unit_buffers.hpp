#pragma once
// `loom plan`'s ZeRO-2/3 per-unit buffers on one pipeline stage (engine/optim/sharded_state.hpp).
#include <vector>

#include "engine/model/gpt_shape.hpp"
#include "engine/model/param_table.hpp"

namespace loom {

// ZeRO-2/3's per-unit buffers on one stage, at the most their caches hold
// (engine/optim/buffer_cache.hpp keeps every buffer for reuse by exact size, so what it holds is,
// per buffer size, the most buffers of that size ever live at once; engine/model/gpt.cpp says when
// the model asks for what, engine/optim/sharded_state.cpp when the storage lets go):
//   weights (zero 3, elements): the embedding and ln_f (both live in the head, from its forward
//     to its backward) and two blocks (the one in use and the next one's prefetched gather; one
//     without prefetch);
//   grads (bytes): the units' fp32 gradient buffers; staging (bytes): the reductions' receive
//     parts (after a unit's first micro-batch, or in 16 bits) and 16-bit copies. Both replayed
//     from ShardedState's order over a step (replay_gradients, zero_unit_buffers.cpp), not estimated.
struct UnitPeaks {
  double weights = 0;
  double grads = 0, staging = 0;
  double largest = 0;  // elements of the largest unit (one reduce-scatter)
};

// `units`: the stage's parameter units; `tied`: a pipeline's tied embedding copy (first or last
// stage), held over the step; `accum`: the most micro-batches a step accumulates; `reduce16`:
// parallel.grad_reduce_dtype bf16.
UnitPeaks unit_peaks(const std::vector<ParamUnit>& units, const StageSpec& spec, bool prefetch, int accum, bool tied,
                     int dp, bool reduce16);

}  // namespace loom
