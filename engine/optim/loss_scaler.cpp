#include "engine/optim/loss_scaler.hpp"

#include <algorithm>

namespace loom {

LossScaler::LossScaler(LossScaleConfig config) : cfg_(config), scale_(config.initial) {}

bool LossScaler::after_step(bool overflow) {
  if (!cfg_.enabled) return false;
  if (overflow) {
    scale_ = std::max(cfg_.min_scale, scale_ * cfg_.backoff);
    good_steps_ = 0;
    return true;
  }
  if (++good_steps_ >= cfg_.growth_interval) {
    scale_ *= cfg_.growth;
    good_steps_ = 0;
  }
  return false;
}

void LossScaler::restore(const LossScaleState& s) {
  if (!cfg_.enabled || s.scale <= 0) return;
  scale_ = s.scale;
  good_steps_ = s.good_steps;
}

}  // namespace loom
