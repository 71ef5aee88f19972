#pragma once
// The training run of one rank: composes the backend, the model, the data, the distributed
// optimizer, the checkpointer and the run's records, and runs the loop. Construction does
// every check and allocation that can fail on bad input (so the CLI can make all ranks agree
// on the error before training starts); run() trains.
//
// The parts, each in its own file of engine/train/:
//   train_step     one optimizer step (1F1B pipeline, gradient reduction, norm, update)
//   run_guard      the run's health (bad steps) and the stop vote
//   evaluation     the validation loss
//   rank_reports   straggler/memory/GPU health, replica and tied-embedding checks
//   step_logger    metrics.jsonl, TensorBoard, the progress line
//   batch_controller  the global batch of each step (train.batch_policy goodput)
// and the Trainer's own members in trainer_*.cpp: buckets (bucket_mb auto), batch (goodput's
// decisions), run_record (run.json), header (the start-of-run summary).
#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "engine/checkpoint/checkpointer.hpp"
#include "engine/config/recipe.hpp"
#include "engine/data/choice_items.hpp"
#include "engine/data/data_loader.hpp"
#include "engine/metrics/run_record.hpp"
#include "engine/metrics/trace_recorder.hpp"
#include "engine/model/gpt.hpp"
#include "engine/optim/distributed_optimizer.hpp"
#include "engine/optim/lr_schedule.hpp"
#include "engine/optim/noise_scale.hpp"
#include "engine/train/batch_controller.hpp"
#include "engine/train/fault_injection.hpp"
#include "engine/train/lr_schedule_of.hpp"
#include "engine/train/mfu_peak.hpp"
#include "engine/train/rank_reports.hpp"
#include "engine/train/run_guard.hpp"
#include "engine/train/resume_data.hpp"
#include "engine/train/step_logger.hpp"
#include "engine/train/train_step.hpp"
#include "kernels/backend.hpp"
#include "kernels/op_timer.hpp"
#include "parallel/process_groups.hpp"
#include "parallel/watchdog.hpp"

namespace loom {

struct MemoryRoom;

struct TrainSummary {
  int64_t start_step = 0;  // steps already done when this session started (resumed)
  int64_t steps = 0;       // steps done when it ended
  double final_loss = 0;
  double final_val_loss = -1;  // -1: no evaluation
  double final_choice_acc_norm = -1;  // log.choices' last acc_norm (rank 0; -1: not scored)
  double tokens_per_s = 0;     // over all steps after the first
  double comm_wait_s = 0;      // gradient reduction time not hidden behind backward, all steps
  double grad_reduce_s = 0;    // the dp gradient reductions' own run time, all steps (< 0: not timed)
  double checkpoint_stall_s = 0;  // time the training loop was held up by checkpoint saves
  int64_t skipped_steps = 0;      // steps with a non-finite loss or gradient norm (no update)
  std::string stopped_early;      // why the run stopped before train.steps ("" if it did not)
  bool resumable = false;         // stopped early with a checkpoint of its last step saved
};

// The process exit status for a run that returned `s` (stop_request.hpp lists them all).
int exit_status(const TrainSummary& s);

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
  // `room`: this rank's memory_room(), read before any rank allocated.
  void build_model(const std::vector<std::string>& hosts, const MemoryRoom& room);
  // trainer_data.cpp: data.train and data.val opened and checked, the same on every rank (their
  // fingerprints to `train_print`, `val_print`: tokens 0 without data.val), the validation
  // batches made; then, once resumed_ and data_now_ are set, where the stream starts.
  TokenDataset open_data(DataFingerprint* train_print, DataFingerprint* val_print);
  // log.choices' items (the first log.choices_limit), tokenized with data.train's tokenizer when
  // they are text, each fitting seq_len.
  std::vector<ChoiceItem> open_choices() const;
  // Scores them with the model as it is (collective over the world); rank 0 puts the accuracy
  // into `rec`.
  void score_choice_items(StepRecord& rec);
  LoaderState resume_position();
  // "" when log.eval_batches global batches fit in data.val's `distinct` sequences, else the note.
  std::string validation_repeat_note(uint64_t distinct, uint64_t repeat_free, bool blend) const;
  // Rank 0: "resumed from ..." and what changed (`batch_note`, resume_notes_), once accepted.
  void announce_resume(const std::string& batch_note) const;
  void start_run_record(const std::string& command, const std::vector<std::string>& hosts);  // rank 0
  void note_resize();  // rank 0: says and records an elastic resume (another process grid)
  // Collective. LoRA: refuses a resume whose model.init_from now gives other weights than the
  // frozen base its adapters were trained on (unless checkpoint.allow_changes; then says so).
  void check_lora_base();
  bool due(int64_t every, int64_t done, bool last) const { return (every > 0 && done % every == 0) || last; }
  double save_checkpoint(int64_t done, const TrainSummary& summary, int64_t first_bad_step);
  // parallel.bucket_mb auto: probes the dp link and re-plans the buckets (collective; rank 0 logs).
  void size_buckets(double backward_s);
  static constexpr double kAutoStartBucketMb = 25.0;  // bucket_mb auto: until the decision
  // train.batch_policy goodput (trainer_batch.cpp): the next step's batch into the loader and the
  // step; the decision after step `done` (collective: the ranks agree on the step time first).
  void apply_batch(int64_t global_batch);
  void decide_batch(int64_t done);
  [[noreturn]] void fail_non_finite(int64_t done, const RunGuard& guard);
  void finish_run(TrainSummary& summary, double timed_s);
  void print_header() const;
  // trainer_trace.cpp: this session's trace name, chosen by rank 0 (collective), and the writing.
  std::string agreed_trace_prefix();
  void write_trace();
  void record_in_run_json(const std::string& key, nlohmann::json value);  // rank 0
  // log.trace records steps [resumed + 1, trace_end()) of the session (the first warms up).
  int64_t trace_end() const { return resumed_.steps_done + 1 + r_.log.trace_steps; }

  // The communication watchdog: started first thing in the constructor; run() stops it when
  // training ends, and this member's destructor on every other path (a constructor or a run()
  // that throws: then the Trainer's tear-down is watched too, being destroyed last).
  struct WatchdogRun {
    void start(double timeout_s, int rank) { parallel::Watchdog::start(timeout_s, rank); }
    ~WatchdogRun() { parallel::Watchdog::stop(); }
  };
  WatchdogRun watchdog_;  // first: destroyed last
  Recipe r_;
  parallel::ProcessGroups& groups_;
  int rank_;
  std::unique_ptr<Backend> backend_;
  OpTimer* op_timer_ = nullptr;  // set when LOOM_PROFILE_OPS=1 wraps the backend
  LoaderLayout layout_;
  std::unique_ptr<DataLoader> train_data_;
  std::vector<StepBatch> val_batches_;
  std::string val_repeat_note_;  // the evaluation asks for more sequences than data.val holds
  std::string val_same_note_;    // data.val is data.train's tokens
  std::string val_split_note_;   // data.val_fraction: what it held out
  std::vector<ChoiceItem> choice_items_;  // log.choices, scored at every evaluation
  std::unique_ptr<Gpt> model_;
  std::unique_ptr<DistributedOptimizer> optim_;
  std::unique_ptr<TrainStep> step_;
  DType compute_ = DType::f32;           // train.precision
  NoiseScale noise_;                     // the gradient noise scale's moving averages
  BatchController batch_;                // the global batch of each step (train.batch_policy)
  StepTimeModel goodput_timing_;         // LOOM_GOODPUT_TIMING: a fixed step-time model (invalid: measure)
  nlohmann::json batch_decisions_ = nlohmann::json::array();  // rank 0: this session's, for run.json
  std::string lora_base_path_, lora_base_fingerprint_;  // LoRA over model.init_from: the base as opened
  std::string cpu_threads_note_;  // CPU backend: the OpenMP threads chosen, or oversubscribing the cores (cpu_threads.hpp)
  nlohmann::json cpu_threads_;    // CPU backend: rank 0's OpenMP threads and where the count came from (run.json)
  double timed_samples_ = 0;             // sequences of the timed steps (all after the first)
  std::unique_ptr<LossScaler> scaler_;   // fp16's dynamic loss scale (disabled otherwise)
  std::unique_ptr<RankReports> reports_;
  std::unique_ptr<StepLogger> logger_;      // rank 0
  std::unique_ptr<RunRecord> run_record_;  // rank 0
  TraceRecorder trace_{0};
  std::string trace_prefix_ = "trace";  // log.dir/<prefix>_rank<R>.json (agreed_trace_prefix)
  FaultInjection faults_;
  std::chrono::steady_clock::time_point started_;
  std::unique_ptr<Checkpointer> checkpointer_;
  ResumePoint resumed_;        // the checkpoint this session started from (path "" if fresh)
  std::vector<std::string> resume_notes_;  // what changed since it was saved (check_lora_base, resume_position)
  int64_t steps_done_ = -1;    // the last step run() completed (run.json's end_step on a failure)
  DataNow data_now_;           // what the data stream is drawn with, recorded in checkpoints
  std::string log_error_;      // rank 0: writing the run directory failed (the run saves and stops)
  LrSchedule schedule_;
  MfuPeak peak_;               // rank 0: the MFU denominator per rank, and where it came from
};

}  // namespace loom
