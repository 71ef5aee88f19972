#pragma once
// The training loop: composes the backend, the model, the data, the optimizer and the metrics
// for one rank. Construction does every check and allocation that can fail on bad input (so
// the CLI can make all ranks agree on the error before training starts); run() trains.
#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "engine/checkpoint/checkpointer.hpp"
#include "engine/config/recipe.hpp"
#include "engine/data/data_loader.hpp"
#include "engine/metrics/metrics_log.hpp"
#include "engine/metrics/nvml_probe.hpp"
#include "engine/metrics/run_record.hpp"
#include "engine/metrics/tensorboard_writer.hpp"
#include "engine/metrics/trace_recorder.hpp"
#include "engine/train/fault_injection.hpp"
#include "engine/train/resume_data.hpp"
#include "engine/model/gpt.hpp"
#include "engine/optim/adamw.hpp"
#include "engine/optim/lr_schedule.hpp"
#include "kernels/backend.hpp"
#include "kernels/op_timer.hpp"
#include "parallel/grad_sync.hpp"
#include "parallel/process_groups.hpp"

namespace loom {

struct TrainSummary {
  int64_t start_step = 0;  // steps already done when this session started (resumed)
  int64_t steps = 0;       // steps done when it ended
  double final_loss = 0;
  double final_val_loss = -1;  // -1: no evaluation
  double tokens_per_s = 0;     // over all steps after the first
  double comm_wait_s = 0;      // gradient reduction time not hidden behind backward, all steps
  double checkpoint_stall_s = 0;  // time the training loop was held up by checkpoint saves
  int64_t skipped_steps = 0;      // steps with a non-finite loss or gradient norm (no update)
  std::string stopped_early;      // why the run stopped before train.steps ("" if it did not)
  bool resumable = false;         // stopped early with a checkpoint of its last step saved
};

// The process exit status for a run that returned `s` (stop_request.hpp lists them all).
int exit_status(const TrainSummary& s);

// What rank 0 logs about every rank at each log step.
struct RankHealth {
  double step_ms = 0, rss_mb = 0, peak_rss_mb = 0;
  int slowest_rank = 0;
  double slowest_ms = 0, median_ms = 0;
  bool gpu = false;  // GPU fields below valid (NVML on every rank)
  double gpu_util_min_pct = 0, gpu_mem_max_mb = 0, gpu_power_max_w = 0, gpu_temp_max_c = 0;
};

class Trainer {
 public:
  // `groups` places this rank in the tp x dp x pp grid; `command` is the command line, for the
  // run record. Throws std::runtime_error (or ConfigError/BackendError) with a message naming
  // the key or file at fault.
  Trainer(const Recipe& recipe, parallel::ProcessGroups& groups, const std::string& command = "");
  ~Trainer();
  TrainSummary run();
  // Records in run.json (rank 0) that the session failed, before the job is aborted.
  void note_failure(const std::string& error);
  Gpt& model() { return *model_; }

 private:
  double evaluate();
  void log_step(int64_t step, double loss, double val_loss, double lr, double grad_norm, double step_s,
                double wait_s, double comm_s, const RankHealth& health, bool skipped);
  RankHealth gather_health(double step_s);  // collective over the world
  std::vector<std::string> gather_hostnames();  // collective over the world
  void start_run_record(const std::string& command, const std::string& resumed_from,
                        const std::vector<std::string>& hosts);  // rank 0
  void write_trace();
  double dp_mean(double local);  // the mean over data-parallel ranks, identical on every rank
  double global_grad_norm();
  void check_replicas();
  void check_tied_embeddings();
  void report_memory();

  Recipe r_;
  parallel::ProcessGroups& groups_;
  int rank_, world_;
  std::unique_ptr<Backend> backend_;
  OpTimer* op_timer_ = nullptr;  // set when LOOM_PROFILE_OPS=1 wraps the backend
  LoaderLayout layout_;
  std::unique_ptr<DataLoader> train_data_;
  std::vector<StepBatch> val_batches_;
  std::unique_ptr<Gpt> model_;
  std::unique_ptr<parallel::GradSync> grad_sync_;
  std::unique_ptr<AdamW> optim_;
  std::unique_ptr<MetricsLog> metrics_;
  std::unique_ptr<TensorBoardWriter> tensorboard_;
  std::unique_ptr<RunRecord> run_record_;
  std::unique_ptr<NvmlProbe> nvml_;  // on the CUDA backend
  TraceRecorder trace_{0};
  FaultInjection faults_;
  std::chrono::steady_clock::time_point started_;
  std::unique_ptr<Checkpointer> checkpointer_;
  int64_t start_step_ = 0;  // steps already done (resumed from a checkpoint)
  std::string resumed_from_;  // the checkpoint this session started from ("" if fresh)
  // The first step (1-based) of the run's history, carried across resumes, whose loss or
  // gradient norm was non-finite or whose loss diverged; -1: none. Checkpoints saved from then on
  // are not clean, and retention keeps the last clean one.
  int64_t first_bad_step_ = -1;
  DataNow data_now_;           // what the data stream is drawn with, recorded in checkpoints
  std::string log_error_;      // rank 0: writing the run directory failed (the run saves and stops)
  LrSchedule schedule_;
  double peak_flops_ = 0;
};

}  // namespace loom
