#include "engine/optim/noise_scale.hpp"

#include <cmath>
#include <stdexcept>

namespace loom {

NoiseScale::NoiseScale(double decay) : decay_(decay) {
  if (!(decay >= 0 && decay < 1)) throw std::invalid_argument("NoiseScale: the decay must be in [0, 1)");
}

void NoiseScale::add(double small_sq, double b_small, double big_sq, double b_big) {
  if (!std::isfinite(small_sq) || !std::isfinite(big_sq)) return;
  if (!(b_small > 0 && b_big > b_small)) throw std::invalid_argument("NoiseScale: need 0 < b_small < b_big");
  const double g2 = (b_big * big_sq - b_small * small_sq) / (b_big - b_small);
  const double tr = (small_sq - big_sq) / (1.0 / b_small - 1.0 / b_big);
  g2_ = decay_ * g2_ + (1 - decay_) * g2;
  tr_ = decay_ * tr_ + (1 - decay_) * tr;
  w_ = decay_ * w_ + (1 - decay_);
  ++n_;
}

void NoiseScale::restore(const State& s) {
  g2_ = s.g2, tr_ = s.tr, n_ = s.n;
  // A state saved without its weight: the weight of n steps at this decay.
  w_ = s.weight > 0 ? s.weight : (s.n > 0 ? 1 - std::pow(decay_, double(s.n)) : 0);
}

double NoiseScale::grad_sq() const { return w_ > 0 ? g2_ / w_ : 0; }

double NoiseScale::trace() const { return w_ > 0 ? tr_ / w_ : 0; }

double NoiseScale::b_simple() const {
  const double g2 = grad_sq();
  return g2 > 0 ? trace() / g2 : -1;
}

}  // namespace loom
