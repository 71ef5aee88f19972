#pragma once
// One training step of one rank: the global batch's micro-batches through this rank's pipeline
// stage (1F1B), the gradient reduction, the global gradient norm and, when both the loss and
// the norm are finite, the optimizer update. Everything the step decides is in StepResult; what
// the run does about it (counting bad steps, stopping, logging) is the loop's business.
#include <cstdint>

#include "engine/data/data_loader.hpp"
#include "engine/metrics/trace_recorder.hpp"
#include "engine/model/gpt.hpp"
#include "engine/optim/distributed_optimizer.hpp"
#include "engine/optim/loss_scaler.hpp"
#include "parallel/process_groups.hpp"

namespace loom {

struct StepResult {
  double loss = 0;         // mean over the global batch, the same on every rank
  double grad_norm = 0;    // before clipping, the same on every rank
  double comm_wait_s = 0;  // gradient reduction not hidden behind backward
  double reduce_s = -1;    // the dp gradient reductions' own run time, summed (< 0: not timed, e.g. NCCL)
  double backward_s = 0;   // the last micro-batch's backward call, host time (the one the zero 0/1 buckets
                           // overlap; the CPU backend computes synchronously, CUDA's is launch time)
  bool skipped = false;    // non-finite loss or norm: no update (the batch is consumed, as in Megatron)
  bool overflow = false;   // fp16: the scaled gradients overflowed (skipped; the loss scale backed off)
  double loss_scale = 1;   // the loss scale this step used (1 without fp16)
  // The noise scale's small batch (noise_scale.hpp): |G_small|^2 of a batch of b_small sequences,
  // unscaled, the same on every rank; b_small 0: not measured.
  double small_sq = 0, b_small = 0;
  // With StepShape::time_compute: the forward and backward passes of every micro-batch, device
  // work included (the goodput policy's per-round time); < 0: not timed.
  double compute_s = -1;
};

// The shape of a step: what the loop's recipe sections say about it.
struct StepShape {
  int micro_batch = 1, seq_len = 1, d_model = 1;
  int micro_steps = 1;              // gradient accumulation: micro-batches per dp rank per step
  int64_t global_batch = 1;         // sequences per step over all dp ranks
  bool overlap_grad_reduce = true;  // parallel.overlap_grad_reduce
  uint64_t seed = 0;                // train.seed: LoRA dropout's masks derive from it
  bool noise_scale = true;          // log.noise_scale: measure the small-batch gradient norm
  bool time_compute = false;        // time the micro-batches' passes (one device synchronisation)
};

// Which small batch the noise scale compares the global batch with.
enum class SmallBatch {
  None,         // not measured: log.noise_scale off, ZeRO-2/3 with pipeline stages, or a single
                // rank with nothing smaller
  DpReplica,    // zero 0/1, dp >= 2: each dp rank's own gradient before the reduction (global batch / dp)
  FirstMicro,   // zero 0/1, dp 1, one pipeline stage, accumulation: the first micro-batch's gradient
  RankMicro,    // ZeRO-2/3, one pipeline stage, dp x accumulation >= 2: each dp rank's first
                // micro-batch's gradient before its reduce-scatter, averaged over dp (micro_batch)
};

class TrainStep {
 public:
  TrainStep(Gpt& model, DistributedOptimizer& optim, parallel::ProcessGroups& groups, TraceRecorder& trace,
            StepShape shape, LossScaler& scaler);
  // Runs step `t` (1-based: the step number, which seeds dropout; AdamW counts its own updates)
  // on `batch` with learning rate `lr`. `poison_grads`
  // makes the reduced gradient NaN; `overflow_grads` (fp16 only) runs the step with a loss scale
  // of 1e30, so that its fp16 gradients overflow (fault injection for the guards' and the
  // scaler's tests).
  StepResult run(const StepBatch& batch, int64_t t, double lr, bool poison_grads = false,
                 bool overflow_grads = false);
  SmallBatch small_batch() const { return small_; }
  // A new global batch from the next step on: `micro_steps` micro-batches per dp rank.
  void set_batch(int micro_steps, int64_t global_batch) {
    s_.micro_steps = micro_steps;
    s_.global_batch = global_batch;
  }

 private:
  Gpt& model_;
  DistributedOptimizer& optim_;
  parallel::ProcessGroups& groups_;
  TraceRecorder& trace_;
  StepShape s_;
  LossScaler& scaler_;
  SmallBatch small_ = SmallBatch::None;
};

}  // namespace loom
