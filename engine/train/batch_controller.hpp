#pragma once
// The global batch of each step, under train.batch_policy:
//   fixed    train.global_batch every step; train.steps steps; the schedule counts steps.
//   goodput  a batch in [batch_min, batch_max] (multiples of micro_batch x dp: accumulation
//            changes, micro_batch stays), re-decided every batch_every steps to maximise Pollux's
//            goodput (engine/optim/goodput.hpp). The run's budget is train.steps x global_batch
//            sequences (the fixed run's), and the learning-rate schedule follows the sequences
//            trained: after S sequences it is at step S / global_batch, times the lr rule's factor.
// The data stream's position counts sequences (data_loader.hpp), so the progress after a
// resume is the checkpoint's position; the batch the run was at is the checkpoint's global
// batch. Every rank holds one controller and feeds it the same numbers (the timing agreed over
// the world first), so every rank makes the same decisions.
#include <cstdint>
#include <string>
#include <vector>

#include "engine/config/recipe.hpp"
#include "engine/optim/goodput.hpp"
#include "engine/optim/lr_schedule.hpp"

namespace loom {

class BatchController {
 public:
  explicit BatchController(const Recipe& r);
  bool adaptive() const { return adaptive_; }
  int64_t batch() const { return batch_; }  // the batch the run is at (chosen by the last decision)
  int64_t unit() const { return bounds_.unit; }
  const GoodputBounds& bounds() const { return bounds_; }
  // A resumed run continues at the checkpoint's batch (`saved`, 0 if it recorded none): rounded
  // to this layout's multiple of micro_batch x dp and clamped to the bounds. Returns a note when
  // that changed it, "" otherwise.
  std::string resume_at(int64_t saved);

  // After `samples` sequences of the stream (its position counts from the run's first step):
  double progress(int64_t samples) const;   // steps of train.global_batch trained
  bool budget_done(int64_t samples) const;  // goodput: train.steps x global_batch trained
  // The next step's batch: batch(), or for the last step only what the budget leaves (rounded up
  // to the unit).
  int64_t next_batch(int64_t samples) const;
  // The learning rate of the next step of `batch` sequences, `samples` trained, noise scale phi.
  double lr(const LrSchedule& schedule, int64_t step, int64_t samples, int64_t batch, double phi) const;

  // The step-time window: one step of `rounds` micro-batches per rank that took `step_s`, of
  // which `compute_s` was the micro-batches' passes.
  void observe(int64_t rounds, double step_s, double compute_s);
  int64_t observed() const { return n_; }
  StepTimeModel measured() const;  // this rank's means over the window (invalid if empty)
  bool due(int64_t done) const { return adaptive_ && done % every_ == 0; }
  // Decides on `time` (agreed over the ranks) and `phi`; a change applies from the next step.
  // Clears the window either way.
  BatchDecision decide(const StepTimeModel& time, double phi);

 private:
  bool adaptive_ = false;
  GoodputBounds bounds_;
  int64_t batch_ = 1, steps_ = 1, every_ = 1;
  std::string lr_rule_;
  double sum_step_ = 0, sum_compute_ = 0, sum_rounds_ = 0;
  int64_t n_ = 0;
};

}  // namespace loom
