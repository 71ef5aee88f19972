// Inverted dropout with the counter-based mask of kernels/dropout_mask.hpp (backend_ops.def:
// dropout): the same elements kept as on the CPU. One thread per element; out may alias x.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>

#include "kernels/cuda/cuda_check.cuh"
#include "kernels/cuda/dtype.cuh"
#include "kernels/cuda/ops.cuh"
#include "kernels/dropout_mask.hpp"

namespace loom::cuda {
namespace {

template <typename T>
__global__ void dropout_kernel(T* out, const T* x, float p, float keep_scale, uint64_t seed, int rows, int cols,
                               int col_offset, int ld) {
  const size_t n = size_t(rows) * size_t(cols);
  for (size_t i = size_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x) {
    const size_t r = i / size_t(cols), c = i % size_t(cols);
    const uint64_t index = uint64_t(r) * uint64_t(ld) + uint64_t(col_offset) + uint64_t(c);
    out[i] = store<T>(dropout_keep(seed, index, p) ? load(x[i]) * keep_scale : 0.0f);
  }
}

}  // namespace

void dropout(TypedPtr out, ConstTypedPtr x, float p, uint64_t seed, int rows, int cols, int col_offset, int ld,
             Context& ctx) {
  const DType dt = act_dtype("dropout", out, x);
  const size_t n = size_t(rows) * size_t(cols);
  if (!n) return;
  const float keep_scale = p < 1.0f ? 1.0f / (1.0f - p) : 0.0f;
  const unsigned grid = unsigned(std::min<size_t>(blocks_for(n, 256), 65535 * 8));
  dispatch_act("dropout", dt, [&](auto tag) {
    using T = decltype(tag);
    dropout_kernel<<<grid, 256, 0, ctx.stream>>>(act_mut<T>(out), act<T>(x), p, keep_scale, seed, rows, cols,
                                                   col_offset, ld);
  });
  LOOM_CUDA_LAUNCHED();
}

}  // namespace loom::cuda
