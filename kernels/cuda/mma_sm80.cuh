#pragma once
// Tensor-core building blocks for sm_80 and newer, used by flash_attention_mma.cu: mma.sync
// m16n8k16 on 16-bit operands with fp32 accumulators, ldmatrix fragment loads from shared
// memory, cp.async copies, and the conversions between accumulator tiles and A operands.
// Below sm_80 the device functions trap: the host never launches their callers there.
//
// Why mma.sync and not WMMA: the register layout of mma.sync's fragments is documented (PTX ISA,
// "Matrix Fragments for mma.m16n8k16"), so the softmax runs on the accumulators in registers,
// and an accumulator tile of scores is, element for element, the A operand of the next product
// (FlashAttention-2's trick): P never goes through shared memory. WMMA's fragments are opaque.
// Lane l of a warp holds, with g = l / 4 and t = l % 4:
//   A (16 x 16, row-major)  a0 = A[g][2t, 2t+1]  a1 = A[g+8][2t, 2t+1]  a2 = A[g][2t+8, 2t+9]
//                           a3 = A[g+8][2t+8, 2t+9]      (two 16-bit values per 32-bit register)
//   B (16 x 8)              b0 = B[2t, 2t+1][g]  b1 = B[2t+8, 2t+9][g]
//   C (16 x 8, fp32)        c0, c1 = C[g][2t, 2t+1]  c2, c3 = C[g+8][2t, 2t+1]
// so the C tiles of columns [16k, 16k+8) and [16k+8, 16k+16) are, rounded to 16 bits, the A
// operand of columns [16k, 16k+16). A warp owns 16 rows of a tile; the row statistics (max,
// sum) need only the 4 lanes of a row (shuffles).
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>
#include <cstring>
#include <type_traits>

#include "kernels/cuda/warp_reduce.cuh"

namespace loom::cuda::sm80 {

template <typename S>
__device__ __forceinline__ uint32_t pack(float lo, float hi);
template <>
__device__ __forceinline__ uint32_t pack<__nv_bfloat16>(float lo, float hi) {
  const __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
  uint32_t u;
  memcpy(&u, &v, 4);
  return u;
}
template <>
__device__ __forceinline__ uint32_t pack<__half>(float lo, float hi) {
  const __half2 v = __floats2half2_rn(lo, hi);
  uint32_t u;
  memcpy(&u, &v, 4);
  return u;
}

// c += a b on one m16n8k16 tile.
template <typename S>
__device__ __forceinline__ void mma(float (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  if constexpr (std::is_same_v<S, __nv_bfloat16>) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
        "{%0,%1,%2,%3};\n"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  } else {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
        "{%0,%1,%2,%3};\n"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  }
#else
  (void)c, (void)a, (void)b0, (void)b1;
  __trap();  // the host never launches these below sm_80
#endif
}

__device__ __forceinline__ unsigned smem_addr(const void* p) {
  return static_cast<unsigned>(__cvta_generic_to_shared(p));
}

// Four 8x8 16-bit matrices from shared memory (lane l gives the address of row l % 8 of matrix
// l / 8; each lane receives element pairs [l / 4][2 (l % 4), +1] of each, or of its transpose).
template <bool kTrans>
__device__ __forceinline__ void ldsm_x4(uint32_t (&r)[4], const uint16_t* p) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  if constexpr (kTrans)
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(smem_addr(p)));
  else
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(smem_addr(p)));
#else
  (void)r, (void)p;
  __trap();
#endif
}

// The A fragment of rows [r0, r0 + 16) x columns [k0, k0 + 16) of a row-major tile
// (matrices: rows +0/+8 x columns +0/+8 -> a0, a1, a2, a3).
__device__ __forceinline__ void load_a(uint32_t (&a)[4], const uint16_t* tile, int ld, int r0, int k0) {
  const int lane = int(threadIdx.x % 32), mi = lane / 8;
  ldsm_x4<false>(a, tile + (r0 + (mi & 1) * 8 + lane % 8) * ld + k0 + (mi >> 1) * 8);
}
// The B fragments of two n-tiles, B[k][n] = tile[n0 + n][k0 + k] for n in [0, 16) (the tile's
// rows are B's columns: K in Q K^T): b[0], b[1] for columns n0.., b[2], b[3] for n0 + 8...
__device__ __forceinline__ void load_b_rows(uint32_t (&b)[4], const uint16_t* tile, int ld, int n0, int k0) {
  const int lane = int(threadIdx.x % 32), mi = lane / 8;
  ldsm_x4<false>(b, tile + (n0 + (mi >> 1) * 8 + lane % 8) * ld + k0 + (mi & 1) * 8);
}
// The same for B[k][n] = tile[k0 + k][n0 + n] (V in P V): the transposing load.
__device__ __forceinline__ void load_b_cols(uint32_t (&b)[4], const uint16_t* tile, int ld, int k0, int n0) {
  const int lane = int(threadIdx.x % 32), mi = lane / 8;
  ldsm_x4<true>(b, tile + (k0 + (mi & 1) * 8 + lane % 8) * ld + n0 + (mi >> 1) * 8);
}

// 16 bytes global -> shared without passing through registers (zero-filled when !valid).
__device__ __forceinline__ void cp_async16(uint16_t* dst, const uint16_t* src, bool valid) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(smem_addr(dst)), "l"(src),
               "r"(valid ? 16 : 0));
#else
  (void)dst, (void)src, (void)valid;
  __trap();
#endif
}
__device__ __forceinline__ void cp_async_commit() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  asm volatile("cp.async.commit_group;\n" ::);
#endif
}
// Waits until at most N of this thread's committed copy groups are still in flight.
template <int N>
__device__ __forceinline__ void cp_async_wait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N));
#endif
}

// The scores of 16 rows x (2 * NP) n-tiles of 8 as the A operands of the next product:
// columns [16 kk, 16 kk + 16) of the accumulator tiles, rounded to S.
template <typename S>
__device__ __forceinline__ void to_a(uint32_t (&a)[4], const float (&lo)[4], const float (&hi)[4]) {
  a[0] = pack<S>(lo[0], lo[1]);
  a[1] = pack<S>(lo[2], lo[3]);
  a[2] = pack<S>(hi[0], hi[1]);
  a[3] = pack<S>(hi[2], hi[3]);
}

// acc[n-tiles of columns [0, N)] += a (16 x 16) times the 16 x N B operand that `load` yields in
// pairs of n-tiles (load(b, n0) fills b for columns n0 .. n0 + 16).
template <typename S, int N, typename Load>
__device__ __forceinline__ void mma_row(float (&acc)[N / 8][4], const uint32_t (&a)[4], Load&& load) {
  for (int np = 0; np < N / 16; ++np) {
    uint32_t b[4];
    load(b, np * 16);
    mma<S>(acc[2 * np], a, b[0], b[1]);
    mma<S>(acc[2 * np + 1], a, b[2], b[3]);
  }
}

}  // namespace loom::cuda::sm80
