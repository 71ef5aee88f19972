#include "engine/train/lr_schedule_of.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>

namespace loom {

LrSchedule lr_schedule_of(const Recipe& r) {
  const OptimConfig& o = r.optim;
  LrSchedule s{o.lr, o.min_lr, o.warmup_steps, r.decay_steps_resolved()};
  s.decay = o.lr_decay == "linear" ? LrDecay::Linear
            : o.lr_decay == "wsd"   ? LrDecay::Wsd
            : o.lr_decay == "inverse_sqrt" ? LrDecay::InverseSqrt
            : o.lr_decay == "constant" ? LrDecay::Constant
                                       : LrDecay::Cosine;
  s.wsd_decay_steps = r.wsd_decay_steps_resolved();
  s.wsd_shape = o.wsd_shape == "cosine" ? DecayShape::Cosine
                : o.wsd_shape == "sqrt" ? DecayShape::Sqrt
                : o.wsd_shape == "exponential" ? DecayShape::Exponential
                                        : DecayShape::Linear;
  return s;
}

std::string describe(const LrSchedule& s) {
  char b[320];
  std::string out;
  if (s.warmup_steps > 0) {
    std::snprintf(b, sizeof b, "warmup %lld step%s to %g, then ", (long long)s.warmup_steps,
                  s.warmup_steps == 1 ? "" : "s", s.lr);
    out = b;
  }
  const char* shape_name[] = {"linear", "cosine", "1 - sqrt", "exponential"};
  if (s.decay != LrDecay::Constant && s.decay_steps <= s.warmup_steps) {
    // (Only through decay_steps auto, train.steps within the warmup: the header notes it.)
    std::snprintf(b, sizeof b, "%g from step %lld (the decay ends at step %lld, inside the warmup)", s.min_lr,
                  (long long)s.warmup_steps + 2, (long long)s.decay_steps);
    return out + b;
  }
  switch (s.decay) {
    case LrDecay::Constant:
      std::snprintf(b, sizeof b, "constant at %g", s.lr);
      break;
    case LrDecay::Cosine:
    case LrDecay::Linear:
      std::snprintf(b, sizeof b, "%s from %g down to %g, reached after step %lld",
                    s.decay == LrDecay::Cosine ? "cosine" : "linear",
                    s.lr, s.min_lr, (long long)s.decay_steps);
      break;
    case LrDecay::InverseSqrt: {
      // The first 0-based step at the floor: lr sqrt(w / i) <= min_lr from about w (lr / min_lr)^2,
      // then moved to where at() says (the closed form's rounding can miss by a step). Megatron's
      // cut-off keeps the curve through index decay_steps; min_lr from the one after.
      const int64_t D = s.decay_steps;
      const double w = double(std::max<int64_t>(1, s.warmup_steps));
      int64_t floor_index = D + 1;
      if (s.min_lr > 0) {
        const double guess = w * (s.lr / s.min_lr) * (s.lr / s.min_lr);
        if (guess < double(D)) {
          floor_index = std::max<int64_t>(s.warmup_steps, int64_t(guess));
          while (floor_index <= D && s.at(floor_index) > s.min_lr) ++floor_index;
          while (floor_index > s.warmup_steps && s.at(floor_index - 1) <= s.min_lr) --floor_index;
        }
      }
      if (floor_index <= D)
        std::snprintf(b, sizeof b, "falling as 1/sqrt(step) from %g to the floor optim.min_lr=%g at step %lld, held there",
                      s.lr, s.min_lr, (long long)floor_index + 1);
      else
        std::snprintf(b, sizeof b, "falling as 1/sqrt(step) from %g to %g at step %lld, then %g", s.lr, s.at(D),
                      (long long)D + 1, s.min_lr);
      break;
    }
    case LrDecay::Wsd: {
      // Steps as the progress line numbers them (steps done): schedule index i is step i + 1.
      std::snprintf(b, sizeof b, "stable at %g through step %lld, then %s down to %g, reached after step %lld", s.lr,
                    (long long)(s.wsd_stable_end() + 1), shape_name[int(s.wsd_shape)], s.min_lr,
                    (long long)s.decay_steps);
      break;
    }
  }
  return out + b;
}

}  // namespace loom
