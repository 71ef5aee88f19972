#pragma once
// Reductions across the lanes of a warp (register shuffles, no shared memory), shared by the
// kernels that sum or take the max of one value per lane:
//   warp_sum(x)              the sum over all 32 lanes, every lane gets it (every lane must call)
//   row_max4(x), row_sum4(x) the max / sum over the 4 lanes 4g .. 4g + 3 that hold one row of an
//                            attention tile (mma's accumulator rows, the FMA tiles' 4 threads per row)
#include <cuda_runtime.h>

namespace loom::cuda {

__device__ __forceinline__ float warp_sum(float x) {
  for (int o = 16; o > 0; o >>= 1) x += __shfl_xor_sync(0xffffffffu, x, o);
  return x;
}

__device__ __forceinline__ float row_max4(float x) {
  x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, 1));
  return fmaxf(x, __shfl_xor_sync(0xffffffffu, x, 2));
}
__device__ __forceinline__ float row_sum4(float x) {
  x += __shfl_xor_sync(0xffffffffu, x, 1);
  return x + __shfl_xor_sync(0xffffffffu, x, 2);
}

}  // namespace loom::cuda
