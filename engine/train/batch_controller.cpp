#include "engine/train/batch_controller.hpp"

#include <algorithm>

namespace loom {

BatchController::BatchController(const Recipe& r)
    : adaptive_(r.goodput()),
      batch_(r.global_batch_resolved()),
      steps_(r.train.steps),
      every_(r.train.batch_every),
      lr_rule_(r.train.batch_lr_rule) {
  bounds_.unit = int64_t(r.train.micro_batch) * r.parallel.dp;
  bounds_.reference = r.global_batch_resolved();
  bounds_.min = r.batch_min_resolved();
  bounds_.max = r.batch_max_resolved();
}

std::string BatchController::resume_at(int64_t saved) {
  if (!adaptive_ || saved <= 0) return "";
  const int64_t u = bounds_.unit;
  const int64_t at = std::clamp((saved + u / 2) / u * u, bounds_.min, bounds_.max);
  batch_ = at;
  if (at == saved) return "";
  return "the checkpoint's global batch " + std::to_string(saved) + " is not a multiple of micro_batch x dp = " +
         std::to_string(u) + " within [" + std::to_string(bounds_.min) + ", " + std::to_string(bounds_.max) +
         "] here: continuing at " + std::to_string(at);
}

double BatchController::progress(int64_t samples) const { return double(samples) / double(bounds_.reference); }

bool BatchController::budget_done(int64_t samples) const {
  return adaptive_ && samples >= steps_ * bounds_.reference;
}

int64_t BatchController::next_batch(int64_t samples) const {
  if (!adaptive_) return batch_;
  const int64_t left = steps_ * bounds_.reference - samples;
  const int64_t u = bounds_.unit;
  return std::clamp((left + u - 1) / u * u, u, batch_);
}

double BatchController::lr(const LrSchedule& schedule, int64_t step, int64_t samples, int64_t batch,
                           double phi) const {
  if (!adaptive_) return schedule.at(step);
  return schedule.at_progress(progress(samples)) * lr_factor(lr_rule_, batch, bounds_.reference, phi);
}

void BatchController::observe(int64_t rounds, double step_s, double compute_s) {
  if (compute_s < 0 || rounds < 1) return;
  sum_step_ += step_s;
  sum_compute_ += compute_s;
  sum_rounds_ += double(rounds);
  ++n_;
}

StepTimeModel BatchController::measured() const {
  if (n_ == 0) return {};
  // t1: the passes' time per micro-batch round; t0: the rest of the step, on average.
  const double t1 = sum_compute_ / sum_rounds_;
  return {std::max(0.0, (sum_step_ - sum_compute_) / double(n_)), t1};
}

BatchDecision BatchController::decide(const StepTimeModel& time, double phi) {
  BatchDecision d = decide_batch(batch_, time, phi, bounds_);
  batch_ = d.to;
  sum_step_ = sum_compute_ = sum_rounds_ = 0;
  n_ = 0;
  return d;
}

}  // namespace loom
