#include "engine/train/train_step.hpp"

#include "engine/util/splitmix64.hpp"

#include <chrono>
#include <cmath>

#include "parallel/pipeline_schedule.hpp"

namespace loom {

TrainStep::TrainStep(Gpt& model, DistributedOptimizer& optim, parallel::ProcessGroups& groups, TraceRecorder& trace,
                     StepShape shape, LossScaler& scaler)
    : model_(model), optim_(optim), groups_(groups), trace_(trace), s_(shape), scaler_(scaler) {}

StepResult TrainStep::run(const StepBatch& batch, int64_t t, double lr, bool poison_grads, bool overflow_grads) {
  const int B = s_.micro_batch, T = s_.seq_len, accum = s_.micro_steps;
  // Each rank's backward adds 1/(global tokens) per token, so the sum over dp is the gradient of
  // the mean loss over the global batch; times fp16's loss scale (1 otherwise).
  // LOOM_FAULT=overflow@STEP: a scale no fp16 gradient survives (the overflow then happens in the
  // real kernels: dlogits become inf in fp16).
  const double scale = overflow_grads && scaler_.enabled() ? 1e30 : scaler_.scale();
  const float dloss = float(scale / double(size_t(s_.global_batch) * T));
  const int stage = groups_.coord().pp, stages = groups_.layout().pp;
  const int slots = parallel::pipeline_in_flight(stage, stages, accum);
  Gpt& model = model_;
  model.zero_grads();
  optim_.begin_step();
  double loss = 0;
  // Zero 0/1: gradient accumulation communicates nothing until the last micro-batch, whose
  // backward hands the optimizer each point from which the gradients are final: it launches those
  // buckets' reduction. (Zero 2/3 reduce every micro-batch's units through the model's
  // UnitStorage instead; the hook is then a no-op.)
  ModelHooks overlap;
  overlap.grads_ready_from = [this](size_t offset) { optim_.grads_ready_from(offset); };
  parallel::StageWork work;
  work.forward = [&](int i) {
    TraceRecorder::Span span(&trace_, "forward", "compute", i);
    const size_t off = size_t(i) * B * T;
    // Dropout's masks follow the global micro-batch (the same samples under any dp split).
    const uint64_t micro = uint64_t(groups_.coord().dp) * uint64_t(accum) + uint64_t(i);
    model.set_dropout_seed(i % slots, splitmix64(s_.seed ^ splitmix64(uint64_t(t) * 0x100000000ull + micro)));
    loss += model.forward(i % slots, batch.tokens.data() + off, batch.targets.data() + off, dloss);
  };
  double backward_s = 0;
  work.backward = [&](int i) {
    TraceRecorder::Span span(&trace_, "backward", "compute", i);
    model.set_hooks(i + 1 == accum && s_.overlap_grad_reduce ? overlap : ModelHooks{});
    const auto t0 = std::chrono::steady_clock::now();
    model.backward(i % slots);
    if (i + 1 == accum) backward_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  };
  work.input = [&](int i) { return model.input(i % slots); };
  work.output = [&](int i) { return model.output(i % slots); };
  work.output_grad = [&] { return model.output_grad(); };
  work.input_grad = [&] { return model.input_grad(); };
  parallel::run_1f1b(groups_.device_pp(), accum, size_t(B) * T * s_.d_model, work);
  model.set_hooks(ModelHooks{});

  StepResult r;
  {
    TraceRecorder::Span span(&trace_, "loss all-reduce", "communication");
    // The loss lives on the last stage: the sum over the pipeline group gives it to every stage.
    loss = groups_.pp().sum_ordered(loss);
  }
  {
    TraceRecorder::Span span(&trace_, "gradient reduction wait", "communication");
    r.comm_wait_s = optim_.reduce_grads();
    r.reduce_s = optim_.reduce_seconds();
    r.backward_s = backward_s;
  }
  if (poison_grads) optim_.poison_grads();
  {
    TraceRecorder::Span span(&trace_, "gradient norm", "communication");
    r.grad_norm = optim_.grad_norm() / scale;  // the norm of the true (unscaled) gradient
    r.loss = groups_.dp().sum_ordered(loss / accum) / groups_.layout().dp;
  }
  r.loss_scale = scaler_.scale();  // the scaler's (a forced overflow's 1e30 is not logged)
  // fp16: scaled gradients that overflowed skip the step and back the scale off; a non-finite
  // loss is no good step either (every rank sees the same loss and norm, so every rank's scaler
  // moves alike).
  r.overflow = scaler_.after_step(!std::isfinite(r.grad_norm) || !std::isfinite(r.loss));
  r.skipped = !std::isfinite(r.loss) || !std::isfinite(r.grad_norm);
  if (!r.skipped) {
    TraceRecorder::Span span(&trace_, "optimizer", "optimizer");
    optim_.update(r.grad_norm, lr, t, scale);
    model.sync_compute_weights();  // the ops read the compute copy of the updated master weights
  }
  return r;
}

}  // namespace loom
