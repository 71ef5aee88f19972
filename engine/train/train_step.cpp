#include "engine/train/train_step.hpp"

#include "engine/util/splitmix64.hpp"

#include <chrono>
#include <cmath>

#include "parallel/pipeline_schedule.hpp"

namespace loom {

TrainStep::TrainStep(Gpt& model, DistributedOptimizer& optim, parallel::ProcessGroups& groups, TraceRecorder& trace,
                     StepShape shape, LossScaler& scaler)
    : model_(model), optim_(optim), groups_(groups), trace_(trace), s_(shape), scaler_(scaler) {
  if (!s_.noise_scale || !optim_.can_measure_local()) return;
  if (optim_.local_is_first_micro()) {  // ZeRO-2/3 (a goodput step trimmed to one micro-batch in all is skipped)
    if (groups_.layout().dp < 2 && s_.micro_steps < 2) return;
    small_ = SmallBatch::RankMicro;
    optim_.measure_local(true);
    return;
  }
  if (groups_.layout().dp >= 2)
    small_ = SmallBatch::DpReplica;
  else if (groups_.layout().pp == 1 && s_.micro_steps >= 2)
    small_ = SmallBatch::FirstMicro;  // (with pipeline stages the first micro-batch's tied embedding
                                      // gradient would be split over two ranks)
  optim_.measure_local(small_ == SmallBatch::DpReplica);
}

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
  double backward_s = 0, small_local = 0;
  work.backward = [&](int i) {
    TraceRecorder::Span span(&trace_, "backward", "compute", i);
    model.set_hooks(i + 1 == accum && s_.overlap_grad_reduce ? overlap : ModelHooks{});
    const auto t0 = std::chrono::steady_clock::now();
    model.backward(i % slots);
    if (i + 1 == accum) backward_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    // The buffer holds the first micro-batch's gradient alone until the second backward adds to it.
    if (i == 0 && small_ == SmallBatch::FirstMicro) small_local = optim_.counted_sum_squares(0, model.table().total());
  };
  work.input = [&](int i) { return model.input(i % slots); };
  work.output = [&](int i) { return model.output(i % slots); };
  work.output_grad = [&] { return model.output_grad(); };
  work.input_grad = [&] { return model.input_grad(); };
  const auto compute_t0 = std::chrono::steady_clock::now();
  parallel::run_1f1b(groups_.device_pp(), accum, size_t(B) * T * s_.d_model, work);
  model.set_hooks(ModelHooks{});

  StepResult r;
  if (s_.time_compute) {
    // Device work included (CUDA launches asynchronously). Gradient buckets that MPI still
    // reduces count in the step's fixed time; on CUDA, NCCL calls ordered on the stream before
    // this point count here (an approximation of the split the goodput model needs).
    model.backend().synchronize();
    r.compute_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - compute_t0).count();
  }
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
  // One rank whose step has a single micro-batch (goodput's trimmed last step) has no smaller
  // batch to compare with: nothing measured this step.
  const int dp = groups_.layout().dp;
  if (small_ == SmallBatch::DpReplica || (small_ == SmallBatch::FirstMicro && accum >= 2) ||
      (small_ == SmallBatch::RankMicro && dp * accum >= 2)) {
    // Each rank's gradient carries 1/(global tokens) per token: the small batch's mean gradient is
    // it times global / small (dp, the micro-batches per step, or both), and fp16's loss scale
    // comes off.
    TraceRecorder::Span span(&trace_, "noise scale norm", "communication");
    const bool per_rank = small_ != SmallBatch::FirstMicro;
    if (per_rank) small_local = optim_.local_sq();
    double sq = groups_.tp().sum_ordered(groups_.pp().sum_ordered(small_local));
    const double ratio = small_ == SmallBatch::DpReplica ? double(dp)
                         : small_ == SmallBatch::FirstMicro ? double(accum)
                                                            : double(dp) * accum;
    if (per_rank) sq = groups_.dp().sum_ordered(sq) / dp;
    r.small_sq = sq * ratio * ratio / (scale * scale);
    r.b_small = double(s_.global_batch) / ratio;
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
    optim_.update(r.grad_norm, lr, scale);
    model.sync_compute_weights();  // the ops read the compute copy of the updated master weights
  }
  return r;
}

}  // namespace loom
