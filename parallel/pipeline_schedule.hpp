#pragma once
// The non-interleaved 1F1B pipeline schedule for one stage: executes one_f_one_b_order
// (pipeline_order.hpp, which describes the schedule). It knows nothing of the model: the stage
// supplies forward/backward of a micro-batch and the buffers that cross stage boundaries; the
// schedule orders them and moves activations forward and their gradients backward over the
// pipeline communicator.
#include <cstddef>
#include <functional>

#include "parallel/communicator.hpp"
#include "parallel/pipeline_order.hpp"

namespace loom::parallel {

// The boundary buffers are typed (float*, bf16*, fp16* convert): activations and their gradients
// cross stages in whatever dtype the stage keeps them, the same on both sides of a boundary.
struct StageWork {
  std::function<void(int micro)> forward;
  std::function<void(int micro)> backward;
  std::function<TypedPtr(int micro)> input;        // where a non-first stage receives micro's activation
  std::function<ConstTypedPtr(int micro)> output;  // what a non-last stage sends after forward(micro)
  std::function<TypedPtr()> output_grad;           // where a non-last stage receives d(output)
  std::function<ConstTypedPtr()> input_grad;       // what a non-first stage sends after backward
};

// Runs one global batch. `pp` is the pipeline group (group rank = stage); `elems` is the size of
// an activation (B*T*C) in elements of the buffers' dtype.
void run_1f1b(Communicator& pp, int micro_batches, size_t elems, const StageWork& work);

}  // namespace loom::parallel
