#include <cuda_runtime.h>

#include <string>

#include "kernels/cuda/cuda_probe.hpp"

namespace loom::cuda {

DeviceProbe probe_devices() {
  DeviceProbe p;
  int n = 0;
  cudaError_t err = cudaGetDeviceCount(&n);
  if (err != cudaSuccess) {
    p.reason = std::string(cudaGetErrorName(err)) + ": " + cudaGetErrorString(err);
    (void)cudaGetLastError();  // clear the sticky error so later calls start clean
    return p;
  }
  if (n == 0) {
    p.reason = "the CUDA runtime reports 0 devices";
    return p;
  }
  p.count = n;
  for (int i = 0; i < n; ++i) {
    cudaDeviceProp prop{};
    if (cudaGetDeviceProperties(&prop, i) != cudaSuccess) continue;
    if (!p.names.empty()) p.names += "; ";
    p.names += std::to_string(i) + ": " + prop.name + " (sm_" + std::to_string(prop.major) +
               std::to_string(prop.minor) + ", " + std::to_string(prop.totalGlobalMem >> 30) + " GiB)";
  }
  return p;
}

long long device_memory_used_bytes() {
  size_t free_b = 0, total_b = 0;
  if (cudaMemGetInfo(&free_b, &total_b) != cudaSuccess) {
    (void)cudaGetLastError();
    return -1;
  }
  return static_cast<long long>(total_b - free_b);
}

}  // namespace loom::cuda
