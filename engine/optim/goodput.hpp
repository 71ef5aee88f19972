#pragma once
// Pollux's goodput (Qiao et al., OSDI 2021) for choosing the global batch as training goes on:
//   goodput(M) = throughput(M) x efficiency(M)
// where, for a global batch of M sequences made of k = M / c micro-batch rounds (c = micro_batch
// x dp sequences per round),
//   throughput(M) = M / T(k),   T(k) = t0 + k * t1
// (t1: one round of forward and backward on every rank; t0: the rest of the step, i.e. the
// gradient reduction left exposed, the norm, the optimizer update and the host's overhead), and
//   efficiency(M) = (phi + M0) / (phi + M)
// with phi the gradient noise scale B_simple (noise_scale.hpp) and M0 the reference batch the
// learning rate was tuned for (train.global_batch). In McCandlish et al.'s model a step of batch M
// makes (1 + phi/M0) / (1 + phi/M) times the progress of a step of batch M0, so one sequence of a
// batch of M does (phi + M0) / (phi + M) of the work of one in a batch of M0: below phi a bigger
// batch is nearly free progress; far above it the extra sequences are wasted.
// With phi small the best batch is the smallest; as the loss falls and phi grows, the optimum
//   k* = sqrt(t0 * phi / (c * t1))   (for phi >> M)
// moves up. Everything here is pure arithmetic: the trainer measures t0, t1 and phi and makes
// every rank call decide() with the same numbers.
#include <cstdint>
#include <string>
#include <vector>

namespace loom {

// T(k) = t0 + k * t1 seconds.
struct StepTimeModel {
  double t0 = 0, t1 = 0;
  double at(int64_t rounds) const { return t0 + double(rounds) * t1; }
  bool valid() const { return t1 > 0 && t0 >= 0; }
};

struct GoodputBounds {
  int64_t unit = 1;        // c: sequences per micro-batch round (micro_batch x dp); every batch is a multiple
  int64_t reference = 1;   // M0: train.global_batch, the batch optim.lr is for
  int64_t min = 1, max = 1;  // train.batch_min, train.batch_max (multiples of unit)
  double min_gain = 0.02;  // change only for a goodput this much higher than the current batch's
};

// (phi + M0) / (phi + M); phi below 0 (not yet estimated) counts as 0.
double batch_efficiency(double phi, int64_t reference, int64_t batch);
// Sequences per second of useful progress at batch M (in sequences of batch M0).
double goodput(int64_t batch, const StepTimeModel& time, double phi, const GoodputBounds& b);

struct BatchDecision {
  int64_t from = 0, to = 0;      // the batch before and the one chosen (equal: no change)
  double goodput_from = 0, goodput_to = 0;
  double efficiency_to = 0;      // efficiency(to)
  double phi = 0;                // the noise scale the decision used
  StepTimeModel time;            // and the step-time model
  std::string reason;            // one line for the log and run.json
  bool changed() const { return from != to; }
};

// The batch among the multiples of `unit` in [min, max] with the highest goodput; `current` is
// kept unless the best beats it by the factor 1 + min_gain (no flapping on measurement noise).
BatchDecision decide_batch(int64_t current, const StepTimeModel& time, double phi, const GoodputBounds& b);

// The learning rate's factor at batch M (train.batch_lr_rule): linear M/M0, sqrt sqrt(M/M0), or
// adascale: AdaScale's gain r = (phi/M0 + 1) / (phi/M + 1) = (M/M0) x efficiency(M), between 1
// (no noise: a bigger batch is no better a step) and M/M0 (pure noise: linear scaling).
double lr_factor(const std::string& rule, int64_t batch, int64_t reference, double phi);

// LOOM_GOODPUT_TIMING="T0:T1" (milliseconds): a fixed step-time model instead of the measured
// one, so that decisions can be reproduced exactly (tests, or replaying a run's decisions).
// Returns an invalid model for null or ""; throws std::runtime_error on anything else malformed.
StepTimeModel timing_override(const char* text);

}  // namespace loom
