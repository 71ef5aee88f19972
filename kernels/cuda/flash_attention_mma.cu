// The tiled causal attention of flash_attention_fma.cu on tensor cores, for bf16 and fp16
// inputs: the same schedule (a block per query tile for the forward and dQ, per key tile for dK
// and dV, causal tile skipping, online softmax, the (B, NH, T) fp32 log-sum-exp, no atomics),
// with every tile product on mma.sync.m16n8k16 (16-bit A and B, fp32 accumulators; sm_80+).
//
// The tensor-core primitives (mma.sync, ldmatrix, cp.async, the fragment layouts) are in
// mma_sm80.cuh.
//
// Rounding: P (forward, dV) and dS (dK, dQ) are rounded to the input dtype before their
// product, as FlashAttention does; scores, exponentials, sums and accumulators stay fp32.
// Exponentials are exp2f of scores already multiplied by log2(e) / sqrt(hs) (one FFMA and one
// ex2 per score; expf adds a range reduction and fix-ups around its ex2): at head size 64 a
// score's two products are only 256 flops, so the softmax's instruction count is of the order of
// the tensor cores' time. The row maxima and the log-sum-exp of the backward are in the same
// base-2 units inside the kernels; the lse written out stays natural (m ln 2 + ln sum).
// Tiles are staged in shared memory with rows padded by 8 elements (16 bytes), which makes the
// ldmatrix fragment loads conflict-free; the tiles a block loops over are double-buffered and
// copied with cp.async (16 bytes at a time) while the previous tile is computed, when every
// pointer is 16-byte aligned (else plain 2-byte loads, the same schedule).
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <type_traits>

#include "kernels/cuda/cuda_check.cuh"
#include "kernels/cuda/dtype.cuh"
#include "kernels/cuda/flash_attention.cuh"
#include "kernels/cuda/mma_sm80.cuh"

namespace loom::cuda {
namespace {

using namespace sm80;

constexpr int kThreads = 128;  // 4 warps, 16 rows each: 64-row tiles
constexpr int kPad = 8;
constexpr float kLog2e = 1.4426950408889634f, kLn2 = 0.6931471805599453f;

// Rows [t0, t0 + rows) of one head's slice (row r at src + r * stride) into a tile of row
// stride D + kPad; rows past T are zero. vec (src and stride 8-element aligned): asynchronous
// 16-byte copies, complete after cp_async_wait and a barrier; else plain loads and stores,
// complete after a barrier.
template <int D>
__device__ void stage(uint16_t* dst, const uint16_t* src, size_t stride, int t0, int rows, int T, bool vec) {
  constexpr int LD = D + kPad;
  if (vec) {
    constexpr int kChunks = D / 8;
    for (int idx = int(threadIdx.x); idx < rows * kChunks; idx += kThreads) {
      const int r = idx / kChunks, c = idx % kChunks * 8, t = t0 + r;
      cp_async16(dst + r * LD + c, src + size_t(t < T ? t : 0) * stride + c, t < T);
    }
  } else {
    for (int idx = int(threadIdx.x); idx < rows * D; idx += kThreads) {
      const int r = idx / D, c = idx % D, t = t0 + r;
      dst[r * LD + c] = t < T ? src[size_t(t) * stride + c] : uint16_t(0);
    }
  }
}

// Forward: a block per (64-row query tile, b, h); key tiles of 64 up to the diagonal, K and V
// double-buffered (the next tile's copy runs during this tile's products).
template <typename S, int D>
__global__ void __launch_bounds__(kThreads) mma_fwd_kernel(S* out, float* lse, const S* qkv, int T, int C, int NH,
                                                             bool vec) {
  constexpr int LD = D + kPad, BT = 64;
  extern __shared__ uint4 smem_raw[];
  uint16_t* Qs = reinterpret_cast<uint16_t*>(smem_raw);
  uint16_t* KVs = Qs + BT * LD;  // buffer i: K at KVs + 2 i BT LD, V after it
  const int nq = (T + BT - 1) / BT, qt = nq - 1 - int(blockIdx.x);
  const int b = int(blockIdx.y) / NH, h = int(blockIdx.y) % NH;
  const int warp = int(threadIdx.x) / 32, g = int(threadIdx.x % 32) / 4, t = int(threadIdx.x % 4);
  const int q0 = qt * BT, row0 = q0 + warp * 16 + g;  // this lane's rows: row0 and row0 + 8
  const size_t stride = 3 * size_t(C);
  const uint16_t* base = reinterpret_cast<const uint16_t*>(qkv) + size_t(b) * T * stride + size_t(h) * D;
  const float scale2 = rsqrtf(float(D)) * kLog2e;  // scores in base-2 units
  auto stage_kv = [&](int kt) {
    uint16_t* Ks = KVs + 2 * (kt & 1) * BT * LD;
    stage<D>(Ks, base + C, stride, kt * BT, BT, T, vec);
    stage<D>(Ks + BT * LD, base + 2 * size_t(C), stride, kt * BT, BT, T, vec);
    cp_async_commit();
  };
  stage<D>(Qs, base, stride, q0, BT, T, vec);
  stage_kv(0);
  cp_async_wait<0>();
  __syncthreads();
  uint32_t qf[D / 16][4];
  for (int ks = 0; ks < D / 16; ++ks) load_a(qf[ks], Qs, LD, warp * 16, ks * 16);
  float o[D / 8][4] = {};
  // m: the row maxima of the base-2 scores; l: this lane's part of the row sums.
  float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.0f, 0.0f};
  for (int kt = 0; kt <= qt; ++kt) {
    const int k0 = kt * BT;
    if (kt < qt) {
      stage_kv(kt + 1);  // into the buffer every warp finished with at the end of kt - 1
      cp_async_wait<1>();
    } else {
      cp_async_wait<0>();
    }
    __syncthreads();
    const uint16_t* Ks = KVs + 2 * (kt & 1) * BT * LD;
    const uint16_t* Vs = Ks + BT * LD;
    float s[BT / 8][4] = {};
    for (int ks = 0; ks < D / 16; ++ks)
      mma_row<S, BT>(s, qf[ks], [&](uint32_t(&bb)[4], int n0) { load_b_rows(bb, Ks, LD, n0, ks * 16); });
    // Only the diagonal tile has keys past a row. Key k0 <= every row of the tile stays
    // unmasked: the maxima are finite.
    float mx[2] = {m[0], m[1]};
    for (int nt = 0; nt < BT / 8; ++nt)
      for (int e = 0; e < 4; ++e) {
        const int row = row0 + (e >> 1) * 8, key = k0 + nt * 8 + 2 * t + (e & 1);
        s[nt][e] = (kt == qt && key > row) ? -INFINITY : s[nt][e] * scale2;
        mx[e >> 1] = fmaxf(mx[e >> 1], s[nt][e]);
      }
    float corr[2];
    for (int r = 0; r < 2; ++r) {
      mx[r] = row_max4(mx[r]);
      corr[r] = exp2f(m[r] - mx[r]);
      m[r] = mx[r];
      l[r] *= corr[r];
    }
    for (int nt = 0; nt < BT / 8; ++nt)
      for (int e = 0; e < 4; ++e) {
        s[nt][e] = exp2f(s[nt][e] - m[e >> 1]);
        l[e >> 1] += s[nt][e];
      }
    for (int nt = 0; nt < D / 8; ++nt)
      for (int e = 0; e < 4; ++e) o[nt][e] *= corr[e >> 1];
    for (int kk = 0; kk < BT / 16; ++kk) {
      uint32_t pa[4];
      to_a<S>(pa, s[2 * kk], s[2 * kk + 1]);
      mma_row<S, D>(o, pa, [&](uint32_t(&bb)[4], int n0) { load_b_cols(bb, Vs, LD, kk * 16, n0); });
    }
    __syncthreads();  // every warp is done with this buffer before it is refilled
  }
  for (int r = 0; r < 2; ++r) {
    const float sum = row_sum4(l[r]);
    const int row = row0 + 8 * r;
    if (row >= T) continue;
    S* orow = out + (size_t(b) * T + row) * C + size_t(h) * D;
    const float inv = 1.0f / sum;
    for (int nt = 0; nt < D / 8; ++nt) {
      orow[nt * 8 + 2 * t] = store<S>(o[nt][2 * r] * inv);
      orow[nt * 8 + 2 * t + 1] = store<S>(o[nt][2 * r + 1] * inv);
    }
    if (t == 0) lse[size_t(blockIdx.y) * T + row] = m[r] * kLn2 + logf(sum);
  }
}

// dK, dV: a block per (64-key tile, b, h), a warp per 16 keys; query tiles of BQ rows from the
// diagonal on, Q and dO double-buffered. S^T = K Q^T and dP^T = V dO^T per tile;
// dV += P^T dO, dK += dS^T Q.
template <typename S, int D, int BQ>
__global__ void __launch_bounds__(kThreads) mma_dkv_kernel(S* dqkv, const S* dout, const S* qkv, const float* lse,
                                                             const float* delta, int T, int C, int NH, bool vec) {
  constexpr int LD = D + kPad, BK = 64;
  extern __shared__ uint4 smem_raw[];
  float* LDs = reinterpret_cast<float*>(smem_raw);  // buffer i: lse at LDs + 2 i BQ, delta after it
  uint16_t* Ks = reinterpret_cast<uint16_t*>(LDs + 4 * BQ);
  uint16_t* Vs = Ks + BK * LD;
  uint16_t* QGs = Vs + BK * LD;  // buffer i: Q at QGs + 2 i BQ LD, dO after it
  const int nq = (T + BQ - 1) / BQ, kt = int(blockIdx.x);
  const int b = int(blockIdx.y) / NH, h = int(blockIdx.y) % NH;
  const int warp = int(threadIdx.x) / 32, g = int(threadIdx.x % 32) / 4, t = int(threadIdx.x % 4);
  const int k0 = kt * BK, j0 = k0 + warp * 16 + g;  // this lane's keys: j0 and j0 + 8
  const size_t stride = 3 * size_t(C);
  const uint16_t* base = reinterpret_cast<const uint16_t*>(qkv) + size_t(b) * T * stride + size_t(h) * D;
  const uint16_t* gbase = reinterpret_cast<const uint16_t*>(dout) + size_t(b) * T * C + size_t(h) * D;
  const float* lrow = lse + size_t(blockIdx.y) * T;
  const float* drow = delta + size_t(blockIdx.y) * T;
  const float scale = rsqrtf(float(D)), scale2 = scale * kLog2e;
  auto stage_q = [&](int qt) {
    const int q0 = qt * BQ, buf = qt & 1;
    stage<D>(QGs + 2 * buf * BQ * LD, base, stride, q0, BQ, T, vec);
    stage<D>(QGs + (2 * buf + 1) * BQ * LD, gbase, size_t(C), q0, BQ, T, vec);
    for (int i = int(threadIdx.x); i < BQ; i += kThreads) {
      LDs[2 * buf * BQ + i] = q0 + i < T ? lrow[q0 + i] * kLog2e : 0.0f;  // base 2
      LDs[(2 * buf + 1) * BQ + i] = q0 + i < T ? drow[q0 + i] : 0.0f;
    }
    cp_async_commit();
  };
  const int qt0 = k0 / BQ;
  stage<D>(Ks, base + C, stride, k0, BK, T, vec);
  stage<D>(Vs, base + 2 * size_t(C), stride, k0, BK, T, vec);
  stage_q(qt0);
  float dk[D / 8][4] = {}, dv[D / 8][4] = {};
  for (int qt = qt0; qt < nq; ++qt) {
    const int q0 = qt * BQ, buf = qt & 1;
    if (qt + 1 < nq) {
      stage_q(qt + 1);
      cp_async_wait<1>();
    } else {
      cp_async_wait<0>();
    }
    __syncthreads();
    const uint16_t* Qs = QGs + 2 * buf * BQ * LD;
    const uint16_t* Gs = Qs + BQ * LD;
    const float* Ls = LDs + 2 * buf * BQ;
    const float* Ds = Ls + BQ;
    float s[BQ / 8][4] = {}, dp[BQ / 8][4] = {};
    for (int ks = 0; ks < D / 16; ++ks) {
      uint32_t ka[4], va[4];
      load_a(ka, Ks, LD, warp * 16, ks * 16);
      load_a(va, Vs, LD, warp * 16, ks * 16);
      mma_row<S, BQ>(s, ka, [&](uint32_t(&bb)[4], int n0) { load_b_rows(bb, Qs, LD, n0, ks * 16); });
      mma_row<S, BQ>(dp, va, [&](uint32_t(&bb)[4], int n0) { load_b_rows(bb, Gs, LD, n0, ks * 16); });
    }
    // Masked: queries before the key (tiles that reach the diagonal) and past T.
    const bool edge = q0 < k0 + BK || q0 + BQ > T;
    for (int nt = 0; nt < BQ / 8; ++nt)
      for (int e = 0; e < 4; ++e) {
        const int j = j0 + (e >> 1) * 8, qi = nt * 8 + 2 * t + (e & 1), q = q0 + qi;
        const float p = (!edge || (q >= j && q < T)) ? exp2f(fmaf(s[nt][e], scale2, -Ls[qi])) : 0.0f;
        s[nt][e] = p;
        dp[nt][e] = p * (dp[nt][e] - Ds[qi]);
      }
    for (int kk = 0; kk < BQ / 16; ++kk) {
      uint32_t pa[4], da[4];
      to_a<S>(pa, s[2 * kk], s[2 * kk + 1]);
      to_a<S>(da, dp[2 * kk], dp[2 * kk + 1]);
      mma_row<S, D>(dv, pa, [&](uint32_t(&bb)[4], int n0) { load_b_cols(bb, Gs, LD, kk * 16, n0); });
      mma_row<S, D>(dk, da, [&](uint32_t(&bb)[4], int n0) { load_b_cols(bb, Qs, LD, kk * 16, n0); });
    }
    __syncthreads();  // every warp is done with this buffer before it is refilled
  }
  for (int r = 0; r < 2; ++r) {
    const int j = j0 + 8 * r;
    if (j >= T) continue;
    S* dkrow = dqkv + (size_t(b) * T + j) * stride + C + size_t(h) * D;
    S* dvrow = dkrow + C;
    for (int nt = 0; nt < D / 8; ++nt)
      for (int e = 0; e < 2; ++e) {
        dkrow[nt * 8 + 2 * t + e] = store<S>(dk[nt][2 * r + e] * scale);
        dvrow[nt * 8 + 2 * t + e] = store<S>(dv[nt][2 * r + e]);
      }
  }
}

// dQ: a block per (64-row query tile, b, h); key tiles of BK rows up to the diagonal, K and V
// double-buffered. S = Q K^T, dP = dO V^T, dQ += dS K.
template <typename S, int D, int BK>
__global__ void __launch_bounds__(kThreads) mma_dq_kernel(S* dqkv, const S* dout, const S* qkv, const float* lse,
                                                            const float* delta, int T, int C, int NH, bool vec) {
  constexpr int LD = D + kPad, BQ = 64;
  extern __shared__ uint4 smem_raw[];
  uint16_t* Qs = reinterpret_cast<uint16_t*>(smem_raw);
  uint16_t* Gs = Qs + BQ * LD;   // dO
  uint16_t* KVs = Gs + BQ * LD;  // buffer i: K at KVs + 2 i BK LD, V after it
  const int nq = (T + BQ - 1) / BQ, qt = nq - 1 - int(blockIdx.x);
  const int b = int(blockIdx.y) / NH, h = int(blockIdx.y) % NH;
  const int warp = int(threadIdx.x) / 32, g = int(threadIdx.x % 32) / 4, t = int(threadIdx.x % 4);
  const int q0 = qt * BQ, row0 = q0 + warp * 16 + g;
  const size_t stride = 3 * size_t(C);
  const uint16_t* base = reinterpret_cast<const uint16_t*>(qkv) + size_t(b) * T * stride + size_t(h) * D;
  const float scale = rsqrtf(float(D)), scale2 = scale * kLog2e;
  auto stage_kv = [&](int kt) {
    uint16_t* Ks = KVs + 2 * (kt & 1) * BK * LD;
    stage<D>(Ks, base + C, stride, kt * BK, BK, T, vec);
    stage<D>(Ks + BK * LD, base + 2 * size_t(C), stride, kt * BK, BK, T, vec);
    cp_async_commit();
  };
  stage<D>(Qs, base, stride, q0, BQ, T, vec);
  stage<D>(Gs, reinterpret_cast<const uint16_t*>(dout) + size_t(b) * T * C + size_t(h) * D, size_t(C), q0, BQ, T,
           vec);
  stage_kv(0);
  float L[2], Dl[2];
  for (int r = 0; r < 2; ++r) {
    const int row = row0 + 8 * r;
    L[r] = row < T ? lse[size_t(blockIdx.y) * T + row] * kLog2e : 0.0f;  // base 2
    Dl[r] = row < T ? delta[size_t(blockIdx.y) * T + row] : 0.0f;
  }
  float dq[D / 8][4] = {};
  const int kt_last = (q0 + BQ - 1 < T - 1 ? q0 + BQ - 1 : T - 1) / BK;
  for (int kt = 0; kt <= kt_last; ++kt) {
    const int k0 = kt * BK;
    if (kt < kt_last) {
      stage_kv(kt + 1);
      cp_async_wait<1>();
    } else {
      cp_async_wait<0>();
    }
    __syncthreads();
    const uint16_t* Ks = KVs + 2 * (kt & 1) * BK * LD;
    const uint16_t* Vs = Ks + BK * LD;
    float s[BK / 8][4] = {}, dp[BK / 8][4] = {};
    for (int ks = 0; ks < D / 16; ++ks) {
      uint32_t qa[4], ga[4];
      load_a(qa, Qs, LD, warp * 16, ks * 16);
      load_a(ga, Gs, LD, warp * 16, ks * 16);
      mma_row<S, BK>(s, qa, [&](uint32_t(&bb)[4], int n0) { load_b_rows(bb, Ks, LD, n0, ks * 16); });
      mma_row<S, BK>(dp, ga, [&](uint32_t(&bb)[4], int n0) { load_b_rows(bb, Vs, LD, n0, ks * 16); });
    }
    const bool edge = k0 + BK - 1 > q0;  // some key of the tile is past some row
    for (int nt = 0; nt < BK / 8; ++nt)
      for (int e = 0; e < 4; ++e) {
        const int r = e >> 1, key = k0 + nt * 8 + 2 * t + (e & 1);
        const float p = (!edge || key <= row0 + 8 * r) ? exp2f(fmaf(s[nt][e], scale2, -L[r])) : 0.0f;
        s[nt][e] = p * (dp[nt][e] - Dl[r]);  // dS
      }
    for (int kk = 0; kk < BK / 16; ++kk) {
      uint32_t da[4];
      to_a<S>(da, s[2 * kk], s[2 * kk + 1]);
      mma_row<S, D>(dq, da, [&](uint32_t(&bb)[4], int n0) { load_b_cols(bb, Ks, LD, kk * 16, n0); });
    }
    __syncthreads();  // every warp is done with this buffer before it is refilled
  }
  for (int r = 0; r < 2; ++r) {
    const int row = row0 + 8 * r;
    if (row >= T) continue;
    S* dqrow = dqkv + (size_t(b) * T + row) * stride + size_t(h) * D;
    for (int nt = 0; nt < D / 8; ++nt)
      for (int e = 0; e < 2; ++e) dqrow[nt * 8 + 2 * t + e] = store<S>(dq[nt][2 * r + e] * scale);
  }
}

// Tiles of the backward: 64-row tiles at head size 64; at 128 the loop's tile is 32 rows, which
// keeps the dK/dV (or dQ) accumulators and the score tiles within the 255 registers.
template <int D>
constexpr int kInner = D == 64 ? 64 : 32;

// Shared memory: 16-bit tiles of 64 or kInner rows of D + kPad, two buffers of the loop's tiles.
template <int D>
constexpr size_t fwd_smem() {
  return size_t(5) * 64 * (D + kPad) * 2;
}
template <int D>
constexpr size_t dkv_smem() {
  return size_t(4) * kInner<D> * 4 + (size_t(2) * 64 + 4 * kInner<D>) * (D + kPad) * 2;
}
template <int D>
constexpr size_t dq_smem() {
  return (size_t(2) * 64 + 4 * kInner<D>) * (D + kPad) * 2;
}

// Tensor cores for this call: bf16/fp16 on sm_80 or newer, unless LOOM_CUDA_ATTENTION=fma.
bool usable(DType dt) {
  if (dt != DType::bf16 && dt != DType::f16) return false;
  static const bool fma_only = [] {
    const char* v = std::getenv("LOOM_CUDA_ATTENTION");
    return v && std::strcmp(v, "fma") == 0;
  }();
  int dev = 0, major = 0;
  if (fma_only || cudaGetDevice(&dev) != cudaSuccess ||
      cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev) != cudaSuccess)
    return false;
  return major >= 8;
}

bool aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

template <typename S, int D>
void forward(S* out, float* lse, const S* qkv, int B, int T, int C, int NH, cudaStream_t stream) {
  static const bool ready = (allow_dynamic_shared(mma_fwd_kernel<S, D>, fwd_smem<D>()), true);
  (void)ready;
  const dim3 grid(unsigned((T + 63) / 64), unsigned(B * NH));
  mma_fwd_kernel<S, D><<<grid, kThreads, fwd_smem<D>(), stream>>>(out, lse, qkv, T, C, NH, aligned16(qkv));
  LOOM_CUDA_LAUNCHED();
}

template <typename S, int D>
void backward(S* dqkv, const S* dout, const S* qkv, const float* lse, const float* delta, int B, int T, int C, int NH,
              cudaStream_t stream) {
  constexpr int BI = kInner<D>;
  static const bool ready = (allow_dynamic_shared(mma_dkv_kernel<S, D, BI>, dkv_smem<D>()),
                             allow_dynamic_shared(mma_dq_kernel<S, D, BI>, dq_smem<D>()), true);
  (void)ready;
  const bool vec = aligned16(qkv) && aligned16(dout);
  const dim3 grid(unsigned((T + 63) / 64), unsigned(B * NH));
  mma_dkv_kernel<S, D, BI><<<grid, kThreads, dkv_smem<D>(), stream>>>(dqkv, dout, qkv, lse, delta, T, C, NH, vec);
  LOOM_CUDA_LAUNCHED();
  mma_dq_kernel<S, D, BI><<<grid, kThreads, dq_smem<D>(), stream>>>(dqkv, dout, qkv, lse, delta, T, C, NH, vec);
  LOOM_CUDA_LAUNCHED();
}

template <typename F>
void dispatch16(DType dt, int hs, F&& f) {
  auto by_size = [&](auto tag) {
    if (hs == 64)
      f(tag, std::integral_constant<int, 64>{});
    else
      f(tag, std::integral_constant<int, 128>{});
  };
  if (dt == DType::bf16)
    by_size(__nv_bfloat16{});
  else
    by_size(__half{});
}

}  // namespace

bool flash_attention_mma_takes(DType dt) { return usable(dt); }

size_t flash_attention_mma_smem(int hs) {
  if (hs == 64) return std::max({fwd_smem<64>(), dkv_smem<64>(), dq_smem<64>()});
  return std::max({fwd_smem<128>(), dkv_smem<128>(), dq_smem<128>()});
}

bool flash_attention_forward_mma(TypedPtr out, float* lse, ConstTypedPtr qkv, int B, int T, int C, int NH,
                                 cudaStream_t stream) {
  if (!usable(out.dtype)) return false;
  dispatch16(out.dtype, C / NH, [&](auto tag, auto d) {
    using S = decltype(tag);
    forward<S, decltype(d)::value>(act_mut<S>(out), lse, act<S>(qkv), B, T, C, NH, stream);
  });
  return true;
}

bool flash_attention_backward_mma(TypedPtr dqkv, ConstTypedPtr dout, ConstTypedPtr qkv, const float* lse,
                                  const float* delta, int B, int T, int C, int NH, cudaStream_t stream) {
  if (!usable(dqkv.dtype)) return false;
  dispatch16(dqkv.dtype, C / NH, [&](auto tag, auto d) {
    using S = decltype(tag);
    backward<S, decltype(d)::value>(act_mut<S>(dqkv), act<S>(dout), act<S>(qkv), lse, delta, B, T, C, NH, stream);
  });
  return true;
}

}  // namespace loom::cuda
