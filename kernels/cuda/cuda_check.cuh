#pragma once
// Error checks for the CUDA backend: every runtime and cuBLASLt call goes through one of these,
// and a failure throws std::runtime_error naming the call, the file and the line.
#include <cublasLt.h>
#include <cuda_runtime.h>

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

}  // namespace loom::cuda

#define LOOM_CUDA_CHECK(call) ::loom::cuda::check((call), #call, __FILE__, __LINE__)
// After a kernel launch: launch errors now, execution errors at the next synchronising call.
#define LOOM_CUDA_LAUNCHED() ::loom::cuda::check(cudaGetLastError(), "kernel launch", __FILE__, __LINE__)
