#pragma once
// The CUDA backend: the Backend interface (kernels/backend.hpp) on one GPU, compute dtype fp32,
// bf16 or fp16 with fp32 accumulation (matmuls through cuBLASLt with fp32 compute; which tensor
// has which dtype: kernels/cuda/ops.cuh), kernels in kernels/cuda/*.cu. All ops run in order on
// one stream; reductions are deterministic. The offload staging copies (copy_to_host_async,
// copy_from_host_async) run on a second stream, ordered against the first by events. Builds
// with only the CUDA toolkit.
#include <cstddef>
#include <memory>

#include "kernels/backend.hpp"

namespace loom {

// Throws std::runtime_error if `device` cannot be used. Defined in the loom_cuda shared module:
// tests link it directly; the loom binary loads it with dlopen (backend_factory.cpp).
std::unique_ptr<Backend> make_cuda_backend(int device = 0);

}  // namespace loom

// The module's entry point for dlopen: a new backend (owned by the caller), or null with the
// reason in `error` (at least 512 bytes).
extern "C" loom::Backend* loom_cuda_create_backend(int device, char* error, int error_size);

namespace loom::cuda {

// How many matmuls have run with a GELU epilogue (matmul_gelu_forward, matmul_backward_gelu
// fused) in this process: the tests check the fused path is taken exactly where it should be.
size_t gelu_epilogue_matmuls();

}  // namespace loom::cuda
