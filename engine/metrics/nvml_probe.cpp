#include "engine/metrics/nvml_probe.hpp"

#include <dlfcn.h>

namespace loom {
namespace {
// The few NVML entry points used, declared from NVML's documented C API (nvml.h is not needed:
// handles are opaque pointers, results ints, 0 = NVML_SUCCESS).
struct Utilization {
  unsigned int gpu, memory;
};
struct Memory {
  unsigned long long total, free, used;
};
using InitFn = int (*)();
using ShutdownFn = int (*)();
using HandleByBusIdFn = int (*)(const char*, void**);
using HandleByIndexFn = int (*)(unsigned int, void**);
using UtilFn = int (*)(void*, Utilization*);
using MemFn = int (*)(void*, Memory*);
using PowerFn = int (*)(void*, unsigned int*);       // milliwatts
using TempFn = int (*)(void*, int, unsigned int*);   // sensor 0 = NVML_TEMPERATURE_GPU
}  // namespace

struct NvmlProbe::Api {
  InitFn init = nullptr;
  ShutdownFn shutdown = nullptr;
  HandleByBusIdFn by_bus_id = nullptr;
  HandleByIndexFn by_index = nullptr;
  UtilFn util = nullptr;
  MemFn mem = nullptr;
  PowerFn power = nullptr;
  TempFn temp = nullptr;
};

NvmlProbe::NvmlProbe(const std::string& pci_bus_id) : NvmlProbe(pci_bus_id, -1) {}
NvmlProbe::NvmlProbe(int index) : NvmlProbe("", index) {}

NvmlProbe::NvmlProbe(const std::string& pci_bus_id, int index) : api_(std::make_unique<Api>()) {
  lib_ = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
  if (!lib_) {
    why_not_ = "libnvidia-ml.so.1 not found (no NVIDIA driver)";
    return;
  }
  auto sym = [&](const char* name) { return dlsym(lib_, name); };
  api_->init = reinterpret_cast<InitFn>(sym("nvmlInit_v2"));
  api_->shutdown = reinterpret_cast<ShutdownFn>(sym("nvmlShutdown"));
  api_->by_bus_id = reinterpret_cast<HandleByBusIdFn>(sym("nvmlDeviceGetHandleByPciBusId_v2"));
  api_->by_index = reinterpret_cast<HandleByIndexFn>(sym("nvmlDeviceGetHandleByIndex_v2"));
  api_->util = reinterpret_cast<UtilFn>(sym("nvmlDeviceGetUtilizationRates"));
  api_->mem = reinterpret_cast<MemFn>(sym("nvmlDeviceGetMemoryInfo"));
  api_->power = reinterpret_cast<PowerFn>(sym("nvmlDeviceGetPowerUsage"));
  api_->temp = reinterpret_cast<TempFn>(sym("nvmlDeviceGetTemperature"));
  if (!api_->init || !api_->by_bus_id || !api_->by_index || api_->init() != 0) {
    why_not_ = "NVML did not initialise";
    return;
  }
  void* dev = nullptr;
  const int failed = index >= 0 ? api_->by_index(unsigned(index), &dev) : api_->by_bus_id(pci_bus_id.c_str(), &dev);
  if (failed != 0) {
    why_not_ = "NVML has no device " + (index >= 0 ? std::to_string(index) : "at PCI bus id " + pci_bus_id);
    return;
  }
  device_ = dev;
}

NvmlProbe::~NvmlProbe() {
  if (device_ && api_->shutdown) api_->shutdown();
  if (lib_) dlclose(lib_);
}

GpuHealth NvmlProbe::read() const {
  GpuHealth h;
  if (!device_) return h;
  Utilization u{};
  if (api_->util && api_->util(device_, &u) == 0) h.util_pct = u.gpu;
  Memory m{};
  if (api_->mem && api_->mem(device_, &m) == 0) {
    h.mem_used_mb = double(m.used) / (1 << 20);
    h.mem_total_mb = double(m.total) / (1 << 20);
  }
  unsigned int mw = 0;
  if (api_->power && api_->power(device_, &mw) == 0) h.power_w = mw / 1000.0;
  unsigned int t = 0;
  if (api_->temp && api_->temp(device_, 0, &t) == 0) h.temp_c = t;
  return h;
}

}  // namespace loom
