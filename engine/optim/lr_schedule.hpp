#pragma once
// The learning rate at each step: linear warmup, then a decay to min_lr that ends at
// `decay_steps` (optim.decay_steps, auto = train.steps), min_lr after it. The decay's shape:
//   cosine    min_lr + (lr - min_lr)(1 + cos(pi p))/2   (GPT-2, nanoGPT, Megatron "cosine")
//   linear    lr - (lr - min_lr) p                        (Megatron, torchtitan "linear")
//   wsd       warmup-stable-decay: lr until the last wsd_decay_steps steps before decay_steps,
//             then down to min_lr along wsd_shape (linear, cosine, 1 - sqrt: Hägele et al.
//             2024, or Megatron's exponential 2 * 0.5^f - 1), as Megatron's --lr-decay-style WSD
//             with --lr-wsd-decay-iters and --lr-wsd-decay-style
//   inverse_sqrt  lr * sqrt(w / step) with w = max(1, warmup), not below min_lr: the Noam /
//             T5 / fairseq decay, Megatron "inverse-square-root"; min_lr after decay_steps
//             (Megatron's cut-off: a step down, since the curve never reaches it on its own)
//   constant  lr (min_lr unused)
// where p = (step - warmup) / (decay_steps - warmup), clamped to [0, 1]. `step` is 0-based:
// step 0 uses lr/warmup, step warmup-1 reaches lr, step decay_steps-1 ends near min_lr.
// Header-only and free of the recipe: the CUDA comparison benchmark builds it with the toolkit
// alone. engine/train/lr_schedule_of.hpp builds one from a recipe.
#include <algorithm>
#include <cmath>
#include <cstdint>

namespace loom {

enum class LrDecay { Cosine, Linear, Wsd, InverseSqrt, Constant };
enum class DecayShape { Linear, Cosine, Sqrt, Exponential };

struct LrSchedule {
  double lr = 6e-4, min_lr = 6e-5;
  int64_t warmup_steps = 0;
  int64_t decay_steps = 1;  // the step at which the decay reaches min_lr
  LrDecay decay = LrDecay::Cosine;
  int64_t wsd_decay_steps = 1;  // wsd: the cooldown's length (at most decay_steps - warmup_steps)
  DecayShape wsd_shape = DecayShape::Linear;

  double at(int64_t step) const { return at_progress(double(step)); }

  // wsd: the last (0-based) step at lr, where the cooldown starts; a cooldown longer than the
  // decay phase is all of it.
  int64_t wsd_stable_end() const {
    const int64_t span = std::max<int64_t>(1, decay_steps - warmup_steps);
    return warmup_steps + span - std::clamp<int64_t>(wsd_decay_steps, 1, span);
  }

  // The same curve at a fractional step (train.batch_policy goodput: the steps of the reference
  // batch trained so far); equal to at(step) at whole steps.
  double at_progress(double step) const {
    // (Capped at lr: between the warmup's last whole steps a fractional position would pass it.)
    if (step < double(warmup_steps)) return std::min(lr, lr * (step + 1) / double(warmup_steps));
    if (decay == LrDecay::Constant) return lr;
    const double span = double(std::max<int64_t>(1, decay_steps - warmup_steps));
    const double p = std::clamp((step - double(warmup_steps)) / span, 0.0, 1.0);
    switch (decay) {
      case LrDecay::InverseSqrt: {
        // Megatron's: max(1, warmup) in place of the warmup, the step counted as its iteration,
        // and its cut-off: min_lr once past decay_steps.
        if (step > double(decay_steps)) return min_lr;
        const double w = double(std::max<int64_t>(1, warmup_steps));
        return std::max(min_lr, lr * std::sqrt(w / std::max(w, step)));
      }
      case LrDecay::Cosine: return down(DecayShape::Cosine, p);
      case LrDecay::Linear: return down(DecayShape::Linear, p);
      case LrDecay::Wsd: {
        const double end = double(wsd_stable_end()), cooldown = double(warmup_steps) + span - end;
        if (step <= end) return lr;
        return down(wsd_shape, std::min(1.0, (step - end) / cooldown));
      }
      case LrDecay::Constant: break;
    }
    return lr;
  }

 private:
  // From lr at f = 0 down to min_lr at f = 1, along `shape` (cosine written as ever, so a
  // cosine run's rates after the warmup are bitwise those of earlier Loom versions; the warmup's
  // last step can differ by one ulp, where lr * w / w rounded above lr and is now capped).
  double down(DecayShape shape, double f) const {
    switch (shape) {
      case DecayShape::Cosine: return min_lr + 0.5 * (lr - min_lr) * (1.0 + std::cos(3.14159265358979323846 * f));
      case DecayShape::Linear: return min_lr + (lr - min_lr) * (1.0 - f);
      case DecayShape::Sqrt: return min_lr + (lr - min_lr) * (1.0 - std::sqrt(f));
      case DecayShape::Exponential: return min_lr + (lr - min_lr) * (2.0 * std::pow(0.5, f) - 1.0);
    }
    return lr;
  }
};

}  // namespace loom
