// Tiled causal attention (FlashAttention-2's schedule) with fp32 FMA tiles in shared memory.
// attention.cu's row kernels give every query row its own warp, which re-reads all of K and V
// from L2 (T times over per head); here a thread block takes a tile of 64 rows and stages each
// 64-row tile of the other operand in shared memory once, so every K/V element fetched from
// global memory is used by 64 rows.
//
// Forward: a block per (query tile, b, h), 256 threads, 4 per query row. Each thread computes
// 16 of the 64 scores of its row against the staged K tile (keys c, c+4, ..., strided so that
// the 4 threads of a row read different banks), the row's running max and sum are updated
// across the 4 threads by shuffles (online softmax), the probabilities go through shared memory
// to the P.V product, where each thread owns hs/4 of the row's output columns. Key tiles past
// the diagonal are never visited (causal tile skipping); only the diagonal tile is masked.
// The row's log-sum-exp is saved, the (B, NH, T) fp32 layout of attention.cu.
//
// Backward: D_i = dO_i.O_i (a warp per row), then two kernels, so that every gradient element
// is one thread's fixed-order sum (deterministic, no atomics):
//   dK/dV: a block per key tile, 4 threads per key row; walks the query tiles at and after the
//          diagonal, recomputes P^T = exp(s K Q^T - lse) and dS^T = P^T (V dO^T - D), and
//          accumulates dV += P^T dO, dK += dS^T Q in registers.
//   dQ:    a block per query tile, 4 threads per query row; walks the key tiles up to the
//          diagonal and accumulates dQ += dS K.
// Shared-memory rows are padded to hs + 4 floats and read as float4 (one load per 4 FMAs): the
// 8 lanes of each quarter-warp phase read rows 4 (or 68) words apart, distinct banks. Inputs of any compute dtype are converted to float as they are staged; all
// arithmetic is fp32 (expf, not the fast intrinsic), outputs rounded once when stored.
// Shared memory: 4 tiles of 64 x (hs + 4) floats plus the 64 x 68 probability tile, 150 KiB at
// hs 128: opted into (sm_80 and sm_90 allow 163 and 227 KiB per block).
#include <cmath>
#include <string>

#include "kernels/cuda/cuda_check.cuh"
#include "kernels/cuda/dtype.cuh"
#include "kernels/cuda/flash_attention.cuh"
#include "kernels/cuda/warp_reduce.cuh"

namespace loom::cuda {
namespace {

constexpr int kTile = 64;                 // rows per query tile and per key tile
constexpr int kThreads = 256;             // 4 threads per row of a tile
constexpr int kPerThread = kTile / 4;     // scores per thread per tile
constexpr int kPStride = kTile + 4;       // padded row of the probability tile

template <int D>
constexpr size_t smem_bytes(int tiles) {
  return (size_t(tiles) * kTile * (D + 4) + size_t(kTile) * kPStride + 2 * kTile) * sizeof(float);
}

// Rows [t0, t0 + 64) of one head's slice (row r at src + r * stride) into a padded tile, as
// float; rows past T are zero.
template <typename S, int D>
__device__ void stage(float* dst, const S* src, size_t stride, int t0, int T) {
  for (int idx = threadIdx.x; idx < kTile * D; idx += kThreads) {
    const int r = idx / D, d = idx % D, t = t0 + r;
    dst[r * (D + 4) + d] = t < T ? load(src[size_t(t) * stride + d]) : 0.0f;
  }
}

__device__ __forceinline__ float4 ld4(const float* p) { return *reinterpret_cast<const float4*>(p); }

// s[k] += a . tile row (c + 4k), k < 16, over the D columns: one float4 of the tile per 4 FMAs.
template <int D>
__device__ __forceinline__ void dots(float (&s)[kPerThread], const float* a, const float* tile, int c) {
  for (int d = 0; d < D; d += 4) {
    const float4 x = ld4(a + d);
    for (int k = 0; k < kPerThread; ++k) {
      const float4 y = ld4(tile + (c + 4 * k) * (D + 4) + d);
      s[k] = fmaf(x.x, y.x, s[k]);
      s[k] = fmaf(x.y, y.y, s[k]);
      s[k] = fmaf(x.z, y.z, s[k]);
      s[k] = fmaf(x.w, y.w, s[k]);
    }
  }
}

// The tile column of a thread's e-th output element: runs of 4 columns (one float4), the 4
// threads of a row interleaved every 16 columns.
__device__ __forceinline__ int col_of(int c, int e) { return 16 * (e / 4) + 4 * c + e % 4; }

// acc[e] += sum over the 64 tile rows j of w[j] * tile[j][col_of(c, e)].
template <int D>
__device__ __forceinline__ void accumulate_rows(float (&acc)[D / 4], const float* w, const float* tile, int c) {
  for (int j = 0; j < kTile; j += 4) {
    const float4 w4 = ld4(w + j);
    const float wj[4] = {w4.x, w4.y, w4.z, w4.w};
    for (int u = 0; u < 4; ++u)
      for (int e = 0; e < D / 16; ++e) {
        const float4 v = ld4(tile + (j + u) * (D + 4) + 16 * e + 4 * c);
        acc[4 * e] = fmaf(wj[u], v.x, acc[4 * e]);
        acc[4 * e + 1] = fmaf(wj[u], v.y, acc[4 * e + 1]);
        acc[4 * e + 2] = fmaf(wj[u], v.z, acc[4 * e + 2]);
        acc[4 * e + 3] = fmaf(wj[u], v.w, acc[4 * e + 3]);
      }
  }
}

template <typename S, int D>
__global__ void __launch_bounds__(kThreads) flash_fwd_kernel(S* out, float* lse, const S* qkv, int T, int C, int NH) {
  extern __shared__ float4 smem4[];
  float* smem = reinterpret_cast<float*>(smem4);
  constexpr int P = D + 4;
  float* Qs = smem;
  float* Ks = Qs + kTile * P;
  float* Vs = Ks + kTile * P;
  float* Ps = Vs + kTile * P;
  const int nq = (T + kTile - 1) / kTile;
  const int qt = nq - 1 - int(blockIdx.x);  // the longest (last) tiles start first
  const int b = int(blockIdx.y) / NH, h = int(blockIdx.y) % NH;
  const int r = int(threadIdx.x) / 4, c = int(threadIdx.x) % 4;
  const int q0 = qt * kTile, i = q0 + r;
  const size_t stride = 3 * size_t(C);
  const S* base = qkv + size_t(b) * T * stride + size_t(h) * D;
  const float scale = rsqrtf(float(D));
  stage<S, D>(Qs, base, stride, q0, T);
  float o[D / 4];
  for (int e = 0; e < D / 4; ++e) o[e] = 0.0f;
  float m = -INFINITY, l = 0.0f;  // l: this thread's part of the row sum
  for (int kt = 0; kt <= qt; ++kt) {
    const int k0 = kt * kTile;
    __syncthreads();  // the previous tile's reads are done
    stage<S, D>(Ks, base + C, stride, k0, T);
    stage<S, D>(Vs, base + 2 * size_t(C), stride, k0, T);
    __syncthreads();
    float s[kPerThread];
    for (int k = 0; k < kPerThread; ++k) s[k] = 0.0f;
    dots<D>(s, Qs + r * P, Ks, c);
    // Every row keeps at least key k0 (<= i) unmasked, so the max is finite from the first tile.
    float mt = m;
    for (int k = 0; k < kPerThread; ++k) {
      s[k] = (kt == qt && k0 + c + 4 * k > i) ? -INFINITY : s[k] * scale;
      mt = fmaxf(mt, s[k]);
    }
    mt = row_max4(mt);
    const float corr = expf(m - mt);
    float ls = 0.0f;
    for (int k = 0; k < kPerThread; ++k) {
      const float p = expf(s[k] - mt);
      ls += p;
      Ps[r * kPStride + c + 4 * k] = p;
    }
    l = l * corr + ls;
    m = mt;
    __syncwarp();  // the row's 4 threads are in one warp
    for (int e = 0; e < D / 4; ++e) o[e] *= corr;
    accumulate_rows<D>(o, Ps + r * kPStride, Vs, c);
  }
  l = row_sum4(l);
  if (i >= T) return;
  S* orow = out + (size_t(b) * T + i) * C + size_t(h) * D;
  const float inv = 1.0f / l;
  for (int e = 0; e < D / 4; ++e) orow[col_of(c, e)] = store<S>(o[e] * inv);
  if (c == 0) lse[size_t(blockIdx.y) * T + i] = m + logf(l);
}

// delta (B, NH, T) = dO . O, a warp per row.
template <typename S>
__global__ void flash_delta_kernel(float* delta, const S* dout, const S* out, int B, int T, int C, int NH) {
  const size_t row = size_t(blockIdx.x) * (blockDim.x / 32) + threadIdx.x / 32;  // (b, h, t)
  const int lane = int(threadIdx.x) % 32;
  if (row >= size_t(B) * NH * T) return;
  const int t = int(row % T), h = int((row / T) % NH), b = int(row / (size_t(T) * NH));
  const int hs = C / NH;
  const size_t off = (size_t(b) * T + t) * C + size_t(h) * hs;
  float s = 0.0f;
  for (int d = lane; d < hs; d += 32) s += load(dout[off + d]) * load(out[off + d]);
  for (int o = 16; o > 0; o >>= 1) s += __shfl_xor_sync(0xffffffffu, s, o);
  if (lane == 0) delta[row] = s;
}

template <typename S, int D>
__global__ void __launch_bounds__(kThreads) flash_dkv_kernel(S* dqkv, const S* dout, const S* qkv, const float* lse,
                                                               const float* delta, int T, int C, int NH) {
  extern __shared__ float4 smem4[];
  float* smem = reinterpret_cast<float*>(smem4);
  constexpr int P = D + 4;
  float* Ks = smem;
  float* Vs = Ks + kTile * P;
  float* Qs = Vs + kTile * P;
  float* Gs = Qs + kTile * P;  // dO
  float* Ps = Gs + kTile * P;  // P^T, then dS^T
  float* Ls = Ps + kTile * kPStride;
  float* Ds = Ls + kTile;
  const int nt = (T + kTile - 1) / kTile;
  const int kt = int(blockIdx.x);  // the first key tiles see the most queries: they start first
  const int b = int(blockIdx.y) / NH, h = int(blockIdx.y) % NH;
  const int r = int(threadIdx.x) / 4, c = int(threadIdx.x) % 4;
  const int k0 = kt * kTile, j = k0 + r;
  const size_t stride = 3 * size_t(C);
  const S* base = qkv + size_t(b) * T * stride + size_t(h) * D;
  const S* gbase = dout + size_t(b) * T * C + size_t(h) * D;
  const float* lrow = lse + size_t(blockIdx.y) * T;
  const float* drow = delta + size_t(blockIdx.y) * T;
  const float scale = rsqrtf(float(D));
  stage<S, D>(Ks, base + C, stride, k0, T);
  stage<S, D>(Vs, base + 2 * size_t(C), stride, k0, T);
  float dk[D / 4], dv[D / 4];
  for (int e = 0; e < D / 4; ++e) dk[e] = dv[e] = 0.0f;
  for (int qt = kt; qt < nt; ++qt) {
    const int q0 = qt * kTile;
    __syncthreads();
    stage<S, D>(Qs, base, stride, q0, T);
    stage<S, D>(Gs, gbase, size_t(C), q0, T);
    if (threadIdx.x < kTile) {
      const int q = q0 + int(threadIdx.x);
      Ls[threadIdx.x] = q < T ? lrow[q] : 0.0f;
      Ds[threadIdx.x] = q < T ? drow[q] : 0.0f;
    }
    __syncthreads();
    float s[kPerThread], dp[kPerThread];
    for (int k = 0; k < kPerThread; ++k) s[k] = dp[k] = 0.0f;
    dots<D>(s, Ks + r * P, Qs, c);
    dots<D>(dp, Vs + r * P, Gs, c);
    for (int k = 0; k < kPerThread; ++k) {
      const int qi = c + 4 * k, q = q0 + qi;
      const float p = (q < T && q >= j) ? expf(s[k] * scale - Ls[qi]) : 0.0f;
      dp[k] = p * (dp[k] - Ds[qi]);
      Ps[r * kPStride + qi] = p;
    }
    __syncwarp();
    accumulate_rows<D>(dv, Ps + r * kPStride, Gs, c);
    __syncwarp();  // the row's P^T is read: overwrite it with dS^T
    for (int k = 0; k < kPerThread; ++k) Ps[r * kPStride + c + 4 * k] = dp[k];
    __syncwarp();
    accumulate_rows<D>(dk, Ps + r * kPStride, Qs, c);
  }
  if (j >= T) return;
  S* dkrow = dqkv + (size_t(b) * T + j) * stride + C + size_t(h) * D;
  S* dvrow = dkrow + C;
  for (int e = 0; e < D / 4; ++e) {
    dkrow[col_of(c, e)] = store<S>(dk[e] * scale);
    dvrow[col_of(c, e)] = store<S>(dv[e]);
  }
}

template <typename S, int D>
__global__ void __launch_bounds__(kThreads) flash_dq_kernel(S* dqkv, const S* dout, const S* qkv, const float* lse,
                                                              const float* delta, int T, int C, int NH) {
  extern __shared__ float4 smem4[];
  float* smem = reinterpret_cast<float*>(smem4);
  constexpr int P = D + 4;
  float* Qs = smem;
  float* Gs = Qs + kTile * P;  // dO
  float* Ks = Gs + kTile * P;
  float* Vs = Ks + kTile * P;
  float* Ps = Vs + kTile * P;  // dS
  const int nq = (T + kTile - 1) / kTile;
  const int qt = nq - 1 - int(blockIdx.x);
  const int b = int(blockIdx.y) / NH, h = int(blockIdx.y) % NH;
  const int r = int(threadIdx.x) / 4, c = int(threadIdx.x) % 4;
  const int q0 = qt * kTile, i = q0 + r;
  const size_t stride = 3 * size_t(C);
  const S* base = qkv + size_t(b) * T * stride + size_t(h) * D;
  const float scale = rsqrtf(float(D));
  stage<S, D>(Qs, base, stride, q0, T);
  stage<S, D>(Gs, dout + size_t(b) * T * C + size_t(h) * D, size_t(C), q0, T);
  const float Li = i < T ? lse[size_t(blockIdx.y) * T + i] : 0.0f;
  const float Di = i < T ? delta[size_t(blockIdx.y) * T + i] : 0.0f;
  float dq[D / 4];
  for (int e = 0; e < D / 4; ++e) dq[e] = 0.0f;
  for (int kt = 0; kt <= qt; ++kt) {
    const int k0 = kt * kTile;
    __syncthreads();
    stage<S, D>(Ks, base + C, stride, k0, T);
    stage<S, D>(Vs, base + 2 * size_t(C), stride, k0, T);
    __syncthreads();
    float s[kPerThread], dp[kPerThread];
    for (int k = 0; k < kPerThread; ++k) s[k] = dp[k] = 0.0f;
    dots<D>(s, Qs + r * P, Ks, c);
    dots<D>(dp, Gs + r * P, Vs, c);
    for (int k = 0; k < kPerThread; ++k) {
      const int jj = c + 4 * k;
      const float p = k0 + jj <= i ? expf(s[k] * scale - Li) : 0.0f;
      Ps[r * kPStride + jj] = p * (dp[k] - Di);
    }
    __syncwarp();
    accumulate_rows<D>(dq, Ps + r * kPStride, Ks, c);
  }
  if (i >= T) return;
  S* dqrow = dqkv + (size_t(b) * T + i) * stride + size_t(h) * D;
  for (int e = 0; e < D / 4; ++e) dqrow[col_of(c, e)] = store<S>(dq[e] * scale);
}

template <typename S, int D>
void forward(S* out, float* lse, const S* qkv, int B, int T, int C, int NH, cudaStream_t stream) {
  static const bool ready = (allow_dynamic_shared(flash_fwd_kernel<S, D>, smem_bytes<D>(3)), true);
  (void)ready;
  const dim3 grid(unsigned((T + kTile - 1) / kTile), unsigned(B * NH));
  flash_fwd_kernel<S, D><<<grid, kThreads, smem_bytes<D>(3), stream>>>(out, lse, qkv, T, C, NH);
  LOOM_CUDA_LAUNCHED();
}

template <typename S, int D>
void backward(S* dqkv, const S* dout, const S* qkv, const float* lse, const float* delta, int B, int T, int C, int NH,
              cudaStream_t stream) {
  static const bool ready = (allow_dynamic_shared(flash_dkv_kernel<S, D>, smem_bytes<D>(4)),
                             allow_dynamic_shared(flash_dq_kernel<S, D>, smem_bytes<D>(4)), true);
  (void)ready;
  const dim3 grid(unsigned((T + kTile - 1) / kTile), unsigned(B * NH));
  flash_dkv_kernel<S, D><<<grid, kThreads, smem_bytes<D>(4), stream>>>(dqkv, dout, qkv, lse, delta, T, C, NH);
  LOOM_CUDA_LAUNCHED();
  flash_dq_kernel<S, D><<<grid, kThreads, smem_bytes<D>(4), stream>>>(dqkv, dout, qkv, lse, delta, T, C, NH);
  LOOM_CUDA_LAUNCHED();
}

}  // namespace

bool flash_attention_supported(int hs, DType dt) {
  if (hs != 64 && hs != 128) return false;
  if (dt != DType::f32 && dt != DType::bf16 && dt != DType::f16) return false;
  int dev = 0, optin = 0;
  if (cudaGetDevice(&dev) != cudaSuccess ||
      cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev) != cudaSuccess)
    return false;
  const size_t need = flash_attention_mma_takes(dt) ? flash_attention_mma_smem(hs)
                                                    : hs == 64 ? smem_bytes<64>(4) : smem_bytes<128>(4);
  return size_t(optin) >= need;
}

void flash_attention_forward(TypedPtr out, float* lse, ConstTypedPtr qkv, int B, int T, int C, int NH,
                             cudaStream_t stream) {
  if (flash_attention_forward_mma(out, lse, qkv, B, T, C, NH, stream)) return;
  dispatch_act("attention_forward", out.dtype, [&](auto tag) {
    using S = decltype(tag);
    if (C / NH == 64)
      forward<S, 64>(act_mut<S>(out), lse, act<S>(qkv), B, T, C, NH, stream);
    else
      forward<S, 128>(act_mut<S>(out), lse, act<S>(qkv), B, T, C, NH, stream);
  });
}

void flash_attention_backward(TypedPtr dqkv, ConstTypedPtr dout, ConstTypedPtr qkv, ConstTypedPtr out,
                              const float* lse, float* delta, int B, int T, int C, int NH, cudaStream_t stream) {
  dispatch_act("attention_backward", dqkv.dtype, [&](auto tag) {
    using S = decltype(tag);
    const size_t rows = size_t(B) * NH * T;
    flash_delta_kernel<S><<<blocks_for(rows, 8), 256, 0, stream>>>(delta, act<S>(dout), act<S>(out), B, T, C, NH);
    LOOM_CUDA_LAUNCHED();
    if (flash_attention_backward_mma(dqkv, dout, qkv, lse, delta, B, T, C, NH, stream)) return;
    if (C / NH == 64)
      backward<S, 64>(act_mut<S>(dqkv), act<S>(dout), act<S>(qkv), lse, delta, B, T, C, NH, stream);
    else
      backward<S, 128>(act_mut<S>(dqkv), act<S>(dout), act<S>(qkv), lse, delta, B, T, C, NH, stream);
  });
}

}  // namespace loom::cuda
