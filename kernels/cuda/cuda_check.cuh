#pragma once
// Error checks for the CUDA backend: every runtime and cuBLASLt call goes through one of these,
// and a failure throws std::runtime_error naming the call, the file and the line.
#include <cublasLt.h>
#include <cuda_runtime.h>

#include <cstdlib>
#include <stdexcept>
#include <string>

namespace loom::cuda {

inline void check(cudaError_t e, const char* what, const char* file, int line) {
  if (e != cudaSuccess)
    throw std::runtime_error(std::string("CUDA: ") + what + " failed at " + file + ":" + std::to_string(line) + ": " +
                             cudaGetErrorString(e));
}
inline void check(cublasStatus_t s, const char* what, const char* file, int line) {
  if (s != CUBLAS_STATUS_SUCCESS)
    throw std::runtime_error(std::string("cuBLASLt: ") + what + " failed at " + file + ":" + std::to_string(line) +
                             ": status " + std::to_string(int(s)));
}

inline unsigned blocks_for(size_t n, unsigned threads) { return unsigned((n + threads - 1) / threads); }

// LOOM_CUDA_SYNC_CHECK=1 (a debugging mode, slow): every launch also waits for the kernel and
// checks how it ran, so an illegal address or a failed assertion names the launch at fault
// (file:line) instead of surfacing at the next synchronising call somewhere else.
inline bool sync_check_launches() {
  static const bool on = [] {
    const char* v = std::getenv("LOOM_CUDA_SYNC_CHECK");
    return v && std::string(v) == "1";
  }();
  return on;
}
inline void launched(const char* file, int line) {
  check(cudaGetLastError(), "kernel launch", file, line);
  if (sync_check_launches()) check(cudaDeviceSynchronize(), "kernel run (LOOM_CUDA_SYNC_CHECK=1)", file, line);
}

}  // namespace loom::cuda

#define LOOM_CUDA_CHECK(call) ::loom::cuda::check((call), #call, __FILE__, __LINE__)
// After every kernel launch (tests/cuda/launches_checked.py makes sure): launch errors now,
// execution errors at the next synchronising call, or here with LOOM_CUDA_SYNC_CHECK=1.
#define LOOM_CUDA_LAUNCHED() ::loom::cuda::launched(__FILE__, __LINE__)

namespace loom::cuda {

// Lets `kernel` launch with `bytes` of dynamic shared memory: above the default 48 KiB a kernel
// must ask, up to the device's opt-in limit. The attribute belongs to the current device's context.
template <typename K>
void allow_dynamic_shared(K* kernel, size_t bytes) {
  LOOM_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(bytes)));
}

}  // namespace loom::cuda
