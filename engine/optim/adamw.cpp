#include "engine/optim/adamw.hpp"

#include <algorithm>
#include <cmath>

#include "engine/optim/owned_pieces.hpp"

namespace loom {

AdamW::AdamW(Backend& backend, const ParamTable& table, AdamWHyper hyper)
    : AdamW(backend, table, hyper, {{0, table.total()}}) {}

AdamW::AdamW(Backend& backend, const ParamTable& table, AdamWHyper hyper, std::vector<parallel::Range> owned)
    : be_(backend), table_(table), h_(hyper), owned_(std::move(owned)) {
  for (const auto& r : owned_) owned_size_ += r.end - r.begin;
  m_ = be_.alloc(std::max<size_t>(owned_size_, 1));
  v_ = be_.alloc(std::max<size_t>(owned_size_, 1));
}

AdamW::~AdamW() {
  be_.release(m_);
  be_.release(v_);
}

void AdamW::step(float* params, const float* packed_grads, double lr, int64_t t) {
  // Piece by piece, each with its own tensor's weight decay.
  for_each_owned_piece(owned_, table_, [&](const ParamInfo& p, size_t lo, size_t hi, size_t k) {
    const double wd = p.weight_decay ? h_.weight_decay : 0.0;
    be_.adamw_update(params + lo, packed_grads + k, m_ + k, v_ + k, hi - lo, float(lr), float(h_.beta1),
                     float(h_.beta2), float(h_.eps), float(wd), t);
  });
}

void AdamW::step_packed(float* packed_params, const float* packed_grads, double lr, int64_t t) {
  for_each_owned_piece(owned_, table_, [&](const ParamInfo& p, size_t lo, size_t hi, size_t k) {
    const double wd = p.weight_decay ? h_.weight_decay : 0.0;
    be_.adamw_update(packed_params + k, packed_grads + k, m_ + k, v_ + k, hi - lo, float(lr), float(h_.beta1),
                     float(h_.beta2), float(h_.eps), float(wd), t);
  });
}

void AdamW::import_state(int which, size_t begin, size_t n, const float* part) {
  float* dst = which == 0 ? m_ : v_;
  size_t packed = 0;
  for (const parallel::Range& r : owned_) {
    const size_t lo = std::max(r.begin, begin), hi = std::min(r.end, begin + n);
    if (lo < hi) be_.upload(dst + packed + (lo - r.begin), part + (lo - begin), hi - lo);
    packed += r.end - r.begin;
  }
}

void clip_by_norm(Backend& be, float* grads, size_t n, double norm, double clip) {
  if (clip > 0 && norm > clip) be.scale(grads, n, float(clip / (norm + 1e-6)));
}

double clip_grad_norm(Backend& be, float* grads, size_t n, double clip) {
  const double norm = std::sqrt(be.sum_squares(grads, n));
  clip_by_norm(be, grads, n, norm, clip);
  return norm;
}

}  // namespace loom
