#pragma once
// Rank 0's record of each logged step: a line of metrics.jsonl, TensorBoard scalars and the
// progress line on stdout (loss, throughput, MFU, waits, memory, the slowest rank, ETA; the
// communication volume in the first two only).
// metrics.jsonl is opened by the constructor (which takes log.dir's lock) and the event file by
// start_tensorboard(), so a log.dir that cannot be written fails before training; a write that
// fails later throws from log().
#include <chrono>
#include <cstdint>
#include <memory>

#include "engine/config/recipe.hpp"
#include "engine/metrics/metrics_log.hpp"
#include "engine/metrics/tensorboard_writer.hpp"
#include "engine/train/rank_reports.hpp"
#include "parallel/comm_volume.hpp"

namespace loom {

// One logged step. `step` is 0-based; val_loss < 0: not evaluated at this step.
struct StepRecord {
  int64_t step = 0;
  double loss = 0, val_loss = -1, lr = 0, grad_norm = 0;
  double step_s = 0, data_wait_s = 0, comm_wait_s = 0;
  bool skipped = false;
  double loss_scale = 0;  // fp16: the loss scale the step used (0: no scaling, not logged)
  // What this rank's device groups moved during the step (ProcessGroups::device_volume() after
  // minus before). Logged when it counted any call; rank 0's figures.
  parallel::CommVolume comm{};
  double backward_s = 0;      // the last micro-batch's backward (what the zero 0/1 buckets overlap)
  double grad_reduce_s = -1;  // the dp gradient reductions' own run time (< 0: untimed, or dp 1: not logged)
  double grad_norm_small = -1;  // the noise scale's small-batch gradient norm (< 0: not measured)
  double b_simple = -1;         // the smoothed noise scale, in sequences (< 0: not yet defined)
  int64_t global_batch = 0;     // train.batch_policy goodput: this step's batch (0: the fixed one, not logged)
  double budget_done = -1;      // goodput: the fraction of the run's budget trained after this step
  double choice_acc = -1, choice_acc_norm = -1;  // log.choices' accuracy at this step (< 0: not scored)
};

// What the logger derives throughput and the ETA from.
struct LogRates {
  double tokens_per_step = 0;     // global batch x seq_len
  double flops_per_token = 0;     // the model's training FLOPs per token (MFU numerator)
  double peak_flops_all = 0;      // the backend's peak FLOP/s times the world size (MFU denominator)
  int64_t start_step = 0;         // steps done before this session
  int64_t total_steps = 0;        // train.steps
  std::chrono::steady_clock::time_point started;  // this session's start (ETA)
  int seq_len = 0;                // tokens per sequence (goodput: the step's tokens from its batch)
  double start_fraction = -1;     // goodput: the budget's fraction trained before this session (ETA)
};

class StepLogger {
 public:
  StepLogger(const LogConfig& log, LogRates rates);
  // Opens the TensorBoard event file (with log.tensorboard): after run.json has the session.
  void start_tensorboard();
  void log(const StepRecord& s, const RankHealth& health);

 private:
  const LogConfig& log_;
  LogRates rates_;
  std::unique_ptr<MetricsLog> metrics_;
  std::unique_ptr<TensorBoardWriter> tensorboard_;
};

}  // namespace loom
