#pragma once
// Dynamic loss scaling for fp16 training (train.precision: fp16), as PyTorch's GradScaler and
// Megatron's DynamicGradScaler do it: the loss gradient is multiplied by `scale` so that small
// activation gradients stay above fp16's smallest normal (6e-5) instead of flushing to zero; the
// reduced gradients are divided by it again before clipping and the update. A step whose scaled
// gradients overflowed (a non-finite gradient norm) is skipped and the scale backs off; after
// `growth_interval` good steps in a row it grows again. bf16 has fp32's exponent range and needs
// none of this: the scaler is then disabled and its scale is 1.
#include <cstdint>

namespace loom {

struct LossScaleConfig {
  bool enabled = false;          // fp16 only
  double initial = 65536;        // train.loss_scale_init (2^16, GradScaler's default)
  int64_t growth_interval = 2000;  // train.loss_scale_growth_interval: good steps before doubling
  double backoff = 0.5;          // train.loss_scale_backoff: factor on overflow
  double growth = 2.0;           // factor after growth_interval good steps
  double min_scale = 1.0;        // never backs off below this
};

// What a checkpoint records, so that a resumed fp16 run does not re-learn its scale.
struct LossScaleState {
  double scale = 0;        // 0: not recorded (a checkpoint of a run without scaling)
  int64_t good_steps = 0;  // good steps since the last change
};

class LossScaler {
 public:
  explicit LossScaler(LossScaleConfig config);
  bool enabled() const { return cfg_.enabled; }
  // The factor on the loss gradient this step (1 when disabled).
  double scale() const { return cfg_.enabled ? scale_ : 1.0; }
  // After the step's gradients were reduced: `overflow` when their norm is not finite. Returns
  // true when the step must be skipped because of it (never when disabled). Every rank calls it
  // with the same argument, so every rank keeps the same scale.
  bool after_step(bool overflow);
  bool at_minimum() const { return scale_ <= cfg_.min_scale; }
  // What a checkpoint records ({} when disabled).
  LossScaleState state() const { return cfg_.enabled ? LossScaleState{scale_, good_steps_} : LossScaleState{}; }
  // Resumes a recorded state (ignored if it recorded none, or when disabled).
  void restore(const LossScaleState& s);

 private:
  LossScaleConfig cfg_;
  double scale_;
  int64_t good_steps_ = 0;
};

}  // namespace loom
