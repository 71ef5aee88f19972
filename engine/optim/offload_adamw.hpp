#pragma once
// Optimizer offload (optim.offload: cpu, ZeRO-Offload): AdamW whose fp32 master copy of the owned
// parameters, both moments and the update itself live in host memory and run on the CPU
// (host_adamw.hpp, vectorised and multi-threaded), so the device holds neither moment: 8 bytes
// per owned parameter less. Each update the owned gradients (packed, after the reduction) come to
// pinned host memory, the CPU updates the master, and the result goes back to the device's
// parameters, where the all-gather of ZeRO 1-2 (or ZeRO-3's gathers) take it as usual.
//
// The master is read from the device's parameters at the first update and again at the first
// update after the optimizer state was loaded (import_state: a checkpoint also sets the
// parameters); afterwards the host copy is authoritative and the device's copy equals it. On the
// CPU backend the device buffers are ordinary memory and the copies plain memcpy: the same code
// runs, and an offloaded run matches one without offload bit for bit (host_adamw's bits are the
// CPU backend's).
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <vector>

#include "engine/model/param_table.hpp"
#include "engine/optim/adamw.hpp"
#include "kernels/backend.hpp"
#include "parallel/range.hpp"

namespace loom {

class OffloadAdamW {
 public:
  OffloadAdamW(Backend& backend, const ParamTable& table, AdamWHyper hyper, std::vector<parallel::Range> owned);
  ~OffloadAdamW();
  OffloadAdamW(const OffloadAdamW&) = delete;
  OffloadAdamW& operator=(const OffloadAdamW&) = delete;

  // One update. `device_params`: the model's flat parameters (packed = false) or ZeRO-3's packed
  // master shard (packed = true), in backend memory; `device_grads`: the owned gradients, packed.
  // Each gradient is multiplied by grad_factor first (unscale and clip in one factor).
  void step(float* device_params, bool packed, const float* device_grads, double lr, int64_t t, float grad_factor);
  size_t owned_size() const { return owned_size_; }
  size_t host_bytes() const { return 4 * owned_size_ * sizeof(float); }  // master, m, v, gradient staging
  // As AdamW's.
  void read_state(int which, size_t packed, size_t n, float* dst) const {
    std::memcpy(dst, (which ? v_ : m_) + packed, n * sizeof(float));
  }
  void import_state(int which, size_t begin, size_t n, const float* part);

 private:
  Backend& be_;
  const ParamTable& table_;
  AdamWHyper h_;
  std::vector<parallel::Range> owned_;
  size_t owned_size_ = 0;
  float *master_ = nullptr, *m_ = nullptr, *v_ = nullptr, *grads_ = nullptr;  // pinned host, packed
  bool master_valid_ = false;
  // Device <-> host for the owned ranges of `device_params`.
  void transfer(float* device_params, bool packed, bool to_host);
};

}  // namespace loom
