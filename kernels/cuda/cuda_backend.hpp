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

// The kernels behind layernorm_backward. `rows` (layernorm.cu): a warp per row, 64 row groups of
// one-element column sums; run and timed on an H100, the default. `vector`
// (layernorm_backward_vec.cu): 16-byte accesses and 8 warps a block over the rows, for the DRAM
// latency that left `rows` at 0.51 ms a call in the GPT-2 step; not yet run on a GPU. A process
// starts with `vector` when LOOM_CUDA_LAYERNORM_BACKWARD=vector, `rows` when it is unset or
// "rows" (anything else: std::runtime_error naming the variable, at the first call).
enum class LayerNormBackwardKernels { rows, vector };
LayerNormBackwardKernels layernorm_backward_kernels();
void set_layernorm_backward_kernels(LayerNormBackwardKernels kernels);  // for this process, from now on
// How many layernorm_backward calls have run the `vector` kernels with 16-byte accesses (not
// their one-element fallback) in this process: the tests check which path ran.
size_t layernorm_backward_vector_calls();

}  // namespace loom::cuda
