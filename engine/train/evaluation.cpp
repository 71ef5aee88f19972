#include "engine/train/evaluation.hpp"

namespace loom {

double evaluate(Gpt& model, parallel::ProcessGroups& groups, const std::vector<StepBatch>& batches, int micro_steps) {
  const int B = model.micro_batch(), T = model.shape().seq_len;
  const size_t elems = size_t(B) * T * model.shape().d_model;
  const StageSpec& st = model.stage();
  parallel::Communicator& pp = groups.device_pp();  // activations: device buffers on CUDA
  double sum = 0;
  int n = 0;
  for (const StepBatch& b : batches)
    for (int micro = 0; micro < micro_steps; ++micro, ++n) {
      const size_t off = size_t(micro) * B * T;
      if (!st.first) pp.recv(model.input(0), elems, pp.rank() - 1, 21);
      sum += model.forward(0, b.tokens.data() + off, b.targets.data() + off, 0.0f);
      if (!st.last) pp.send(model.output(0), elems, pp.rank() + 1, 21);
    }
  // Host scalars: MPI.
  return groups.dp().sum_ordered(groups.pp().sum_ordered(sum) / n) / groups.layout().dp;
}

}  // namespace loom
