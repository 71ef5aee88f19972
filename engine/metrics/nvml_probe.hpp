#pragma once
// GPU health through NVML, loaded at run time (dlopen of libnvidia-ml.so.1), so the binary
// needs no NVIDIA library to link or to run: where NVML is absent (CPU nodes, this development
// machine) available() is false and the trainer logs no GPU fields.
#include <memory>
#include <string>

namespace loom {

struct GpuHealth {
  double util_pct = 0;   // GPU busy over the last sample period
  double mem_used_mb = 0, mem_total_mb = 0;
  double power_w = 0;
  double temp_c = 0;
};

class NvmlProbe {
 public:
  // Loads NVML and opens the GPU at `pci_bus_id` (Backend::device_pci_bus_id(): the one this
  // rank's backend drives; NVML's own indices ignore CUDA_VISIBLE_DEVICES). Never throws.
  explicit NvmlProbe(const std::string& pci_bus_id);
  // Opens NVML's device number `index` (NVML's numbering, which is not CUDA's: for tests).
  explicit NvmlProbe(int index);
  ~NvmlProbe();
  NvmlProbe(const NvmlProbe&) = delete;
  NvmlProbe& operator=(const NvmlProbe&) = delete;

  bool available() const { return device_ != nullptr; }
  const std::string& why_not() const { return why_not_; }  // when not available
  // Current readings (fields NVML cannot give stay 0). Requires available().
  GpuHealth read() const;

 private:
  struct Api;
  NvmlProbe(const std::string& pci_bus_id, int index);
  std::unique_ptr<Api> api_;
  void* lib_ = nullptr;
  void* device_ = nullptr;
  std::string why_not_;
};

}  // namespace loom
