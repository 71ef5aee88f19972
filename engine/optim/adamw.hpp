#pragma once
// AdamW over the model's flat parameter buffer: moments m and v are flat buffers with the
// parameter table's offsets; weight decay applies to the tensors the table marks for it.
#include <cstdint>

#include "engine/model/param_table.hpp"
#include "kernels/backend.hpp"

namespace loom {

struct AdamWHyper {
  double beta1 = 0.9, beta2 = 0.95, eps = 1e-8, weight_decay = 0.1;
};

class AdamW {
 public:
  AdamW(Backend& backend, const ParamTable& table, AdamWHyper hyper);
  ~AdamW();
  AdamW(const AdamW&) = delete;
  AdamW& operator=(const AdamW&) = delete;

  // One update with learning rate `lr`; t counts updates from 1 (bias correction).
  void step(float* params, const float* grads, double lr, int64_t t);
  float* m() { return m_; }
  float* v() { return v_; }
  size_t state_bytes() const { return 2 * table_.total() * sizeof(float); }

 private:
  Backend& be_;
  const ParamTable& table_;
  AdamWHyper h_;
  float* m_;
  float* v_;
};

// Global L2 norm of the flat gradient buffer; if clip > 0 and the norm exceeds it, scales the
// gradients by clip / (norm + 1e-6) (torch.nn.utils.clip_grad_norm_). Returns the pre-clip norm.
double clip_grad_norm(Backend& be, float* grads, size_t n, double clip);

}  // namespace loom
