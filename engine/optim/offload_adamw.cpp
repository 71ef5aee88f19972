#include "engine/optim/offload_adamw.hpp"

#include <algorithm>
#include <cstring>

#include "engine/optim/host_adamw.hpp"
#include "engine/optim/owned_pieces.hpp"

namespace loom {

OffloadAdamW::OffloadAdamW(Backend& backend, const ParamTable& table, AdamWHyper hyper,
                           std::vector<parallel::Range> owned)
    : be_(backend), table_(table), h_(hyper), owned_(std::move(owned)) {
  for (const auto& r : owned_) owned_size_ += r.size();
  const size_t bytes = std::max<size_t>(owned_size_, 1) * sizeof(float);
  master_ = static_cast<float*>(be_.alloc_host_pinned(bytes));
  m_ = static_cast<float*>(be_.alloc_host_pinned(bytes));
  v_ = static_cast<float*>(be_.alloc_host_pinned(bytes));
  grads_ = static_cast<float*>(be_.alloc_host_pinned(bytes));
}

OffloadAdamW::~OffloadAdamW() {
  for (float* p : {master_, m_, v_, grads_}) be_.release_host_pinned(p);
}

void OffloadAdamW::transfer(float* device_params, bool packed, bool to_host) {
  size_t k = 0;
  for (const parallel::Range& r : owned_) {
    float* dev = device_params + (packed ? k : r.begin);
    if (to_host)
      be_.copy_to_host_async(master_ + k, dev, r.size() * sizeof(float));
    else
      be_.copy_from_host_async(dev, master_ + k, r.size() * sizeof(float));
    k += r.size();
  }
}

void OffloadAdamW::step(float* device_params, bool packed, const float* device_grads, double lr, int64_t t,
                        float grad_factor) {
  if (!master_valid_) transfer(device_params, packed, true);
  be_.copy_to_host_async(grads_, device_grads, owned_size_ * sizeof(float));
  be_.wait_host_copies();
  master_valid_ = true;
  // Piece by piece, each with its own tensor's weight decay (as AdamW::step_packed).
  for_each_owned_piece(owned_, table_, [&](const ParamInfo& p, size_t lo, size_t hi, size_t k) {
    const double wd = p.weight_decay ? h_.weight_decay : 0.0;
    host_adamw_update(master_ + k, grads_ + k, m_ + k, v_ + k, hi - lo, float(lr), float(h_.beta1), float(h_.beta2),
                      float(h_.eps), float(wd), t, grad_factor);
  });
  // Ordered before the ops queued after it (the all-gather, the next forward); the master is not
  // written again before the next step's wait.
  transfer(device_params, packed, false);
}

void OffloadAdamW::import_state(int which, size_t begin, size_t n, const float* part) {
  master_valid_ = false;  // a load sets the parameters too: read them again at the next update
  float* dst = which == 0 ? m_ : v_;
  size_t k = 0;
  for (const parallel::Range& r : owned_) {
    const size_t lo = std::max(r.begin, begin), hi = std::min(r.end, begin + n);
    if (lo < hi) std::memcpy(dst + k + (lo - r.begin), part + (lo - begin), (hi - lo) * sizeof(float));
    k += r.size();
  }
}

}  // namespace loom
