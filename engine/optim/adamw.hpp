#pragma once
// AdamW over (part of) the model's flat parameter buffer. The optimizer owns a list of ranges of
// the flat buffer: all of it normally, this rank's ZeRO-1 shard otherwise. Its moments m and v
// and the gradients it is given are packed in the order of those ranges, so optimizer memory
// is proportional to what the rank owns. Weight decay follows the parameter table.
#include <cstdint>
#include <utility>
#include <vector>

#include "engine/model/param_table.hpp"
#include "kernels/backend.hpp"
#include "parallel/range.hpp"

namespace loom {

struct AdamWHyper {
  double beta1 = 0.9, beta2 = 0.95, eps = 1e-8, weight_decay = 0.1;
};

class AdamW {
 public:
  // The whole buffer.
  AdamW(Backend& backend, const ParamTable& table, AdamWHyper hyper);
  // Exactly the `owned` ranges (a ZeRO shard; possibly none).
  AdamW(Backend& backend, const ParamTable& table, AdamWHyper hyper, std::vector<parallel::Range> owned);
  ~AdamW();
  AdamW(const AdamW&) = delete;
  AdamW& operator=(const AdamW&) = delete;

  // One update of the owned parameters with learning rate `lr`; `packed_grads` holds the
  // gradients of the owned ranges, packed. t counts updates from 1 (bias correction).
  void step(float* params, const float* packed_grads, double lr, int64_t t);
  // The same with the parameters packed like the gradients (ZeRO-3's master shard).
  void step_packed(float* packed_params, const float* packed_grads, double lr, int64_t t);
  float* m() { return m_; }
  float* v() { return v_; }
  size_t owned_size() const { return owned_size_; }
  size_t state_bytes() const { return 2 * owned_size_ * sizeof(float); }
  // Elements [packed, packed + n) of this rank's packed moment `which` (0: m, 1: v) into host `dst`.
  void read_state(int which, size_t packed, size_t n, float* dst) const { be_.download(dst, (which ? v_ : m_) + packed, n); }
  // The same for flat elements [begin, begin + n) of one moment (which = 0: m, 1: v) from `part`
  // (n floats): what this rank owns of that range is copied in (a checkpoint loads tensor by
  // tensor).
  void import_state(int which, size_t begin, size_t n, const float* part);

 private:
  Backend& be_;
  const ParamTable& table_;
  AdamWHyper h_;
  std::vector<parallel::Range> owned_;
  size_t owned_size_ = 0;
  float* m_;
  float* v_;
};

// Global L2 norm from a sum of squares, and clipping: if clip > 0 and norm > clip, scales the n
// gradients by clip / (norm + 1e-6) (torch.nn.utils.clip_grad_norm_).
void clip_by_norm(Backend& be, float* grads, size_t n, double norm, double clip);
// Both in one, for gradients that are complete on this rank. Returns the pre-clip norm.
double clip_grad_norm(Backend& be, float* grads, size_t n, double clip);

}  // namespace loom
