#pragma once
// The recipe's learning-rate schedule (optim.lr, min_lr, warmup_steps, lr_decay, decay_steps,
// wsd_decay_steps, wsd_shape; auto resolved against train.steps), and the one-line account of
// it that a run's header prints.
#include <string>

#include "engine/config/recipe.hpp"
#include "engine/optim/lr_schedule.hpp"

namespace loom {

LrSchedule lr_schedule_of(const Recipe& r);

// "warmup 100 steps to 0.0006, then stable at 0.0006 through step 8001, then linear down to
// 6e-05, reached after step 10000" (steps numbered as the progress line does:
// steps done, metrics.jsonl's 0-based step + 1)
std::string describe(const LrSchedule& s);

}  // namespace loom
