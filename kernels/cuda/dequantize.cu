// Blockwise dequantization (backend_ops.def: dequantize; the formats in kernels/quantize.hpp):
// out[i] = level(code i) * scales[i / block] in fp32, rounded once to the output's dtype, the
// same single product as the CPU reference (so the two agree bit for bit). Grid-stride loops:
// int8 a thread per element; NF4 a thread per code byte (two elements), the 16 levels in
// shared memory (the lookups of a warp diverge: shared memory serves distinct addresses in one
// pass, the constant cache would serialise them).
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <stdexcept>
#include <string>

#include "kernels/cuda/cuda_check.cuh"
#include "kernels/cuda/dtype.cuh"
#include "kernels/cuda/ops.cuh"
#include "kernels/quantize.hpp"

namespace loom::cuda {
namespace {

// The NF4 table in constant memory, initialised at compile time from the host's kNF4Levels
// (one definition for both backends).
#define LOOM_NF4(k) ::loom::kNF4Levels[k]
__constant__ float c_nf4_levels[16] = {LOOM_NF4(0),  LOOM_NF4(1),  LOOM_NF4(2),  LOOM_NF4(3),
                                       LOOM_NF4(4),  LOOM_NF4(5),  LOOM_NF4(6),  LOOM_NF4(7),
                                       LOOM_NF4(8),  LOOM_NF4(9),  LOOM_NF4(10), LOOM_NF4(11),
                                       LOOM_NF4(12), LOOM_NF4(13), LOOM_NF4(14), LOOM_NF4(15)};
#undef LOOM_NF4

unsigned grid_for(size_t n) { return unsigned(std::min<size_t>(blocks_for(n, 256), 65535 * 8)); }

template <typename T>
__global__ void dequantize_int8_kernel(T* out, const uint8_t* codes, const float* scales, size_t n, size_t block) {
  for (size_t i = size_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x) {
    const int v = (int(codes[i]) ^ 0x80) - 128;  // the int8 of the byte (two's complement)
    out[i] = store<T>(float(v) * scales[i / block]);
  }
}

// Thread j decodes byte j: element 2j (low nibble) and 2j + 1 (high nibble, if < n).
template <typename T>
__global__ void dequantize_nf4_kernel(T* out, const uint8_t* codes, const float* scales, size_t n, size_t block) {
  __shared__ float levels[16];
  if (threadIdx.x < 16) levels[threadIdx.x] = c_nf4_levels[threadIdx.x];
  __syncthreads();
  const size_t nbytes = (n + 1) / 2;
  for (size_t j = size_t(blockIdx.x) * blockDim.x + threadIdx.x; j < nbytes; j += size_t(gridDim.x) * blockDim.x) {
    const unsigned c = codes[j];
    const size_t i = 2 * j;
    out[i] = store<T>(levels[c & 0xfu] * scales[i / block]);
    if (i + 1 < n) out[i + 1] = store<T>(levels[c >> 4] * scales[(i + 1) / block]);
  }
}

}  // namespace

void dequantize(TypedPtr out, const uint8_t* codes, const float* scales, size_t n, int block, int kind,
                Context& ctx) {
  const DType dt = act_dtype("dequantize", out);
  if (kind != int(QuantKind::Int8) && kind != int(QuantKind::NF4))
    throw std::invalid_argument("dequantize: unknown quantization kind " + std::to_string(kind) +
                                " (0 = int8, 1 = nf4)");
  if (block <= 0) throw std::invalid_argument("dequantize: block must be positive, got " + std::to_string(block));
  if (!n) return;
  dispatch_act("dequantize", dt, [&](auto tag) {
    using T = decltype(tag);
    if (kind == int(QuantKind::Int8))
      dequantize_int8_kernel<<<grid_for(n), 256, 0, ctx.stream>>>(act_mut<T>(out), codes, scales, n, size_t(block));
    else
      dequantize_nf4_kernel<<<grid_for((n + 1) / 2), 256, 0, ctx.stream>>>(act_mut<T>(out), codes, scales, n,
                                                                           size_t(block));
  });
  LOOM_CUDA_LAUNCHED();
}

}  // namespace loom::cuda
