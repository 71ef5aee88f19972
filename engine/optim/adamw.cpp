#include "engine/optim/adamw.hpp"

#include <cmath>

namespace loom {

AdamW::AdamW(Backend& backend, const ParamTable& table, AdamWHyper hyper)
    : be_(backend), table_(table), h_(hyper), m_(backend.alloc(table.total())), v_(backend.alloc(table.total())) {}

AdamW::~AdamW() {
  be_.release(m_);
  be_.release(v_);
}

void AdamW::step(float* params, const float* grads, double lr, int64_t t) {
  for (const ParamInfo& p : table_.params()) {
    const double wd = p.weight_decay ? h_.weight_decay : 0.0;
    be_.adamw_update(params + p.offset, grads + p.offset, m_ + p.offset, v_ + p.offset, p.numel, float(lr),
                     float(h_.beta1), float(h_.beta2), float(h_.eps), float(wd), t);
  }
}

double clip_grad_norm(Backend& be, float* grads, size_t n, double clip) {
  const double norm = std::sqrt(be.sum_squares(grads, n));
  if (clip > 0 && norm > clip) be.scale(grads, n, float(clip / (norm + 1e-6)));
  return norm;
}

}  // namespace loom
