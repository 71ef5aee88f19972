#pragma once
// The non-interleaved 1F1B pipeline schedule (PipeDream-Flush, as in Megatron-LM) for one
// stage. It knows nothing of the model: the stage supplies forward/backward of a micro-batch
// and the buffers that cross stage boundaries; the schedule orders them and moves activations
// forward and their gradients backward over the pipeline communicator.
//
// Stage r of p with m micro-batches: min(p - r - 1, m) warm-up forwards, then alternately one
// forward and one backward, then the remaining backwards. So stage r holds at most
// min(p - r, m) micro-batches' activations. Paired transfers (send this, receive that) are
// posted together, non-blocking, and waited together, so neighbours never deadlock on each
// other's sends.
#include <cstddef>
#include <algorithm>
#include <functional>

#include "parallel/communicator.hpp"

namespace loom::parallel {

struct StageWork {
  std::function<void(int micro)> forward;
  std::function<void(int micro)> backward;
  std::function<float*(int micro)> input;         // where a non-first stage receives micro's activation
  std::function<const float*(int micro)> output;  // what a non-last stage sends after forward(micro)
  std::function<float*()> output_grad;            // where a non-last stage receives d(output)
  std::function<const float*()> input_grad;       // what a non-first stage sends after backward
};

// Peak number of micro-batches whose activations the stage holds at once.
inline int pipeline_in_flight(int stage, int stages, int micro_batches) {
  return std::min(stages - stage, micro_batches);
}

// Runs one global batch. `pp` is the pipeline group (group rank = stage); `elems` is the size of
// an activation (B*T*C).
void run_1f1b(Communicator& pp, int micro_batches, size_t elems, const StageWork& work);

}  // namespace loom::parallel
