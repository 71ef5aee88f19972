#pragma once
// Error checks for the CUDA backend: every runtime and cuBLASLt call goes through one of these,
// and a failure throws std::runtime_error naming the call, the file and the line; a device
// allocation that fails for want of memory throws DeviceOutOfMemory instead.
#include <cublasLt.h>
#include <cuda_runtime.h>

#include <cstdio>
#include <cstdlib>
#include <new>
#include <stdexcept>
#include <string>
#include <utility>

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

// A device allocation refused for want of memory. A std::bad_alloc, as a host allocation's is,
// so the trainer reports both alike (with what `loom plan` predicts and what to change); what()
// says how much was asked for, where, and what the device had, as PyTorch's message does.
class DeviceOutOfMemory : public std::bad_alloc {
 public:
  explicit DeviceOutOfMemory(std::string what) : what_(std::move(what)) {}
  const char* what() const noexcept override { return what_.c_str(); }

 private:
  std::string what_;
};

// Throws DeviceOutOfMemory for a cudaMalloc of `bytes` that returned cudaErrorMemoryAllocation.
[[noreturn]] inline void throw_device_oom(size_t bytes, const char* file, int line) {
  (void)cudaGetLastError();  // that error is not sticky: leave none for the next launch check to find
  constexpr double MB = 1024.0 * 1024.0;
  char b[320];
  int device = -1;
  size_t free_b = 0, total_b = 0;
  if (cudaGetDevice(&device) == cudaSuccess && cudaMemGetInfo(&free_b, &total_b) == cudaSuccess) {
    std::snprintf(b, sizeof b, "GPU out of memory: cudaMalloc of %.1f MB failed at %s:%d (CUDA device %d: %.0f MB "
                  "free of %.0f MB, every process's allocations counted)", bytes / MB, file, line, device,
                  free_b / MB, total_b / MB);
  } else {
    (void)cudaGetLastError();
    std::snprintf(b, sizeof b, "GPU out of memory: cudaMalloc of %.1f MB failed at %s:%d (the device's free "
                  "memory could not be read)", bytes / MB, file, line);
  }
  throw DeviceOutOfMemory(b);
}

// cudaMalloc, with DeviceOutOfMemory for want of memory and check()'s error for anything else.
inline void* device_malloc(size_t bytes, const char* file, int line) {
  void* p = nullptr;
  const cudaError_t e = cudaMalloc(&p, bytes);
  if (e == cudaErrorMemoryAllocation) throw_device_oom(bytes, file, line);
  check(e, "cudaMalloc", file, line);
  return p;
}
#define LOOM_CUDA_MALLOC(bytes) ::loom::cuda::device_malloc((bytes), __FILE__, __LINE__)

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
