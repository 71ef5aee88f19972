#pragma once
// Linear warmup then cosine decay to min_lr (GPT-2/nanoGPT/Megatron "cosine"). `step` is
// 0-based: step 0 uses lr/warmup, step warmup-1 reaches lr, the last step ends near min_lr.
#include <algorithm>
#include <cmath>
#include <cstdint>

namespace loom {

struct LrSchedule {
  double lr = 6e-4, min_lr = 6e-5;
  int64_t warmup_steps = 0, total_steps = 1;

  double at(int64_t step) const {
    if (step < warmup_steps) return lr * double(step + 1) / double(warmup_steps);
    const double progress =
        std::min(1.0, double(step - warmup_steps) / double(std::max<int64_t>(1, total_steps - warmup_steps)));
    return min_lr + 0.5 * (lr - min_lr) * (1.0 + std::cos(3.14159265358979323846 * progress));
  }
  // The same curve at a fractional step (train.batch_policy goodput: the steps of the reference
  // batch trained so far); equal to at(step) at whole steps.
  double at_progress(double step) const {
    if (step < double(warmup_steps)) return lr * (step + 1) / double(warmup_steps);
    const double progress =
        std::min(1.0, (step - double(warmup_steps)) / double(std::max<int64_t>(1, total_steps - warmup_steps)));
    return min_lr + 0.5 * (lr - min_lr) * (1.0 + std::cos(3.14159265358979323846 * progress));
  }
};

}  // namespace loom
