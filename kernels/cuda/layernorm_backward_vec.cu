// LayerNorm's backward with 16-byte accesses and more bytes in flight (LOOM_CUDA_LAYERNORM_BACKWARD
// =vector, cuda::LayerNormBackwardKernels::vector). Written on 2026-11-26 without a GPU: it has
// not run on one yet, so layernorm.cu's kernels stay the default until it has been checked and
// timed there.
//
// Why: in the GPT-2 124M bf16 step on an H100 (docs/kernels.md), layernorm_backward took 0.51 ms
// a call at N 16384 x C 768, a quarter of the step, while bench_cuda_ops timed the same kernels
// at 0.065 ms for N 8192 in fp32. The bench reads one 25 MB tensor as both dout and inp, which
// stays in the 50 MB L2; in the step the tensors come from DRAM. layernorm.cu's dw/db kernel
// keeps ~12 warps on an SM, each with one 2-byte load of two tensors outstanding (1.5 KB an SM),
// where covering DRAM latency at 3.35 TB/s takes ~25 KB an SM: a latency-bound loop of 256
// dependent steps. Here:
//   input gradient   a warp per row as before (the two row sums, then the gradient), but each
//                    lane moves W elements per access (W = vector_width: 8 bf16/fp16, 4 fp32).
//   dw, db           blocks of 8 warps over a tile of 32 * W columns (a lane's W adjacent
//                    columns); block (x, g) sums the rows g * 8 + warp + k * groups * 8, so a
//                    block has 8 rows of 16-byte loads in flight, not one. The 8 warps' sums are
//                    added in warp order in shared memory, giving one partial per row group in
//                    the workspace; a second kernel adds the groups, 8 warps a column tile, then
//                    the warps in order. Fixed partitions and orders: deterministic, like
//                    layernorm.cu (the sums are grouped differently, so the two differ by
//                    rounding).
// W falls back to 1 (the same kernels, one element per access) when C is not a multiple of the
// vector width or a tensor is not 16-byte aligned (views into a flat buffer may not be).
#include <algorithm>
#include <atomic>

#include "kernels/cuda/cuda_check.cuh"
#include "kernels/cuda/dtype.cuh"
#include "kernels/cuda/ops.cuh"
#include "kernels/cuda/warp_reduce.cuh"

namespace loom::cuda {
namespace {

constexpr int kWarps = 8;          // warps a block, all kernels here
constexpr int kMaxGroups = 128;    // row groups of the dw/db partial sums (fewer for small N)
std::atomic<size_t> g_vector_calls{0};  // layernorm_backward_vector_calls()

template <typename T, int W>
__global__ void __launch_bounds__(kWarps * 32)
    dinp_kernel(T* dinp, const T* dout, const T* inp, const T* w, const float* mean, const float* rstd, int N, int C) {
  const int row = blockIdx.x * kWarps + threadIdx.x / 32, lane = threadIdx.x % 32;
  if (row >= N) return;
  const size_t base = size_t(row) * C;
  const float m = mean[row], r = rstd[row];
  float a = 0, bsum = 0;  // sums of dnorm and of dnorm * norm over the row
  for (int c = lane * W; c < C; c += 32 * W) {
    float d[W], x[W], g[W];
    load_w<T, W>(d, dout + base + c);
    load_w<T, W>(x, inp + base + c);
    load_w<T, W>(g, w + c);
    for (int k = 0; k < W; ++k) {
      const float dn = d[k] * g[k];
      a += dn;
      bsum += dn * (x[k] - m) * r;
    }
  }
  a = warp_sum(a) / C;
  bsum = warp_sum(bsum) / C;
  for (int c = lane * W; c < C; c += 32 * W) {
    float d[W], x[W], g[W], di[W];
    load_w<T, W>(d, dout + base + c);
    load_w<T, W>(x, inp + base + c);
    load_w<T, W>(g, w + c);
    load_w<T, W>(di, dinp + base + c);
    for (int k = 0; k < W; ++k) di[k] += (d[k] * g[k] - a - (x[k] - m) * r * bsum) * r;
    store_w<T, W>(dinp + base + c, di);
  }
}

// part_w[g * C + c], part_b[g * C + c]: the sums over row group g (rows g * kWarps + warp +
// k * groups * kWarps) of dout * norm and of dout, column c.
template <typename T, int W>
__global__ void __launch_bounds__(kWarps * 32)
    dwdb_partial_kernel(float* part_w, float* part_b, const T* dout, const T* inp, const float* mean,
                        const float* rstd, int N, int C) {
  __shared__ float tile_w[kWarps][32 * W], tile_b[kWarps][32 * W];
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, groups = gridDim.y;
  const int c0 = (blockIdx.x * 32 + lane) * W;  // C % W == 0: all W columns or none are in range
  float sw[W] = {}, sb[W] = {};
  const int stride = groups * kWarps;
  // Two rows a step, both rows' loads issued before either is used (the second row's behind a
  // predicate, not a branch that would end the step): a row of a step past N adds exact zeros,
  // so the sum is the one of a plain loop over the rows in order.
  for (int n = blockIdx.y * kWarps + warp; c0 < C && n < N; n += 2 * stride) {
    const int n1 = n + stride;
    float d0[W], x0[W], d1[W] = {}, x1[W] = {}, m1 = 0, r1 = 0;
    load_w<T, W>(d0, dout + size_t(n) * C + c0);
    load_w<T, W>(x0, inp + size_t(n) * C + c0);
    if (n1 < N) {
      load_w<T, W>(d1, dout + size_t(n1) * C + c0);
      load_w<T, W>(x1, inp + size_t(n1) * C + c0);
      m1 = mean[n1];
      r1 = rstd[n1];
    }
    const float m0 = mean[n], r0 = rstd[n];
    for (int k = 0; k < W; ++k) {
      sw[k] += d0[k] * (x0[k] - m0) * r0;
      sb[k] += d0[k];
    }
    for (int k = 0; k < W; ++k) {
      sw[k] += d1[k] * (x1[k] - m1) * r1;
      sb[k] += d1[k];
    }
  }
  for (int k = 0; k < W; ++k) {
    tile_w[warp][lane * W + k] = sw[k];
    tile_b[warp][lane * W + k] = sb[k];
  }
  __syncthreads();
  for (int j = threadIdx.x; j < 32 * W; j += kWarps * 32) {
    const int c = blockIdx.x * 32 * W + j;
    if (c >= C) break;
    float tw = 0, tb = 0;
    for (int q = 0; q < kWarps; ++q) {
      tw += tile_w[q][j];
      tb += tile_b[q][j];
    }
    part_w[size_t(blockIdx.y) * C + c] = tw;
    part_b[size_t(blockIdx.y) * C + c] = tb;
  }
}

// dw[c] += the sum of part_w[g * C + c] over the groups (db likewise): warp q adds the groups
// q, q + kWarps, ..., then the warps' sums are added in warp order.
__global__ void __launch_bounds__(kWarps * 32)
    sum_groups_kernel(float* dw, float* db, const float* part_w, const float* part_b, int groups, int C) {
  __shared__ float tile_w[kWarps][32], tile_b[kWarps][32];
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, c = blockIdx.x * 32 + lane;
  float sw = 0, sb = 0;
  if (c < C) {
#pragma unroll 4
    for (int g = warp; g < groups; g += kWarps) {
      sw += part_w[size_t(g) * C + c];
      sb += part_b[size_t(g) * C + c];
    }
  }
  tile_w[warp][lane] = sw;
  tile_b[warp][lane] = sb;
  __syncthreads();
  if (warp != 0 || c >= C) return;
  float tw = 0, tb = 0;
  for (int q = 0; q < kWarps; ++q) {
    tw += tile_w[q][lane];
    tb += tile_b[q][lane];
  }
  dw[c] += tw;
  db[c] += tb;
}

bool aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

template <typename T, int W>
void launch(T* dinp, float* dw, float* db, const T* dout, const T* inp, const T* w, const float* mean,
            const float* rstd, int N, int C, float* part_w, float* part_b, int groups, cudaStream_t stream) {
  dinp_kernel<T, W><<<blocks_for(size_t(N), kWarps), kWarps * 32, 0, stream>>>(dinp, dout, inp, w, mean, rstd, N, C);
  LOOM_CUDA_LAUNCHED();
  if (!dw) return;  // a frozen LayerNorm: only the input gradient
  const dim3 grid(blocks_for(size_t(C), 32 * W), unsigned(groups));
  dwdb_partial_kernel<T, W><<<grid, kWarps * 32, 0, stream>>>(part_w, part_b, dout, inp, mean, rstd, N, C);
  LOOM_CUDA_LAUNCHED();
  sum_groups_kernel<<<blocks_for(size_t(C), 32), kWarps * 32, 0, stream>>>(dw, db, part_w, part_b, groups, C);
  LOOM_CUDA_LAUNCHED();
}

}  // namespace

size_t layernorm_backward_vector_calls() { return g_vector_calls.load(std::memory_order_relaxed); }

void layernorm_backward_vector(TypedPtr dinp, float* dw, float* db, ConstTypedPtr dout, ConstTypedPtr inp,
                               ConstTypedPtr w, const float* mean, const float* rstd, int N, int C,
                               Context& ctx) {
  const DType dt = act_dtype("layernorm_backward", dinp, dout, inp, w);
  // One row group per kWarps rows up to kMaxGroups: a function of N alone, so the partition (and
  // the result) does not depend on the device.
  const int groups = int(std::min<size_t>(kMaxGroups, std::max<size_t>(1, blocks_for(size_t(N), kWarps))));
  const size_t need = size_t(2) * groups * C * sizeof(float);
  const Workspace ws = ctx.workspace(need);
  if (N == 0) return;
  if (ws.bytes < need) throw std::runtime_error("layernorm_backward: workspace too small");
  float* part_w = static_cast<float*>(ws.ptr);
  float* part_b = part_w + size_t(groups) * C;
  dispatch_act("layernorm_backward", dt, [&](auto tag) {
    using T = decltype(tag);
    constexpr int kW = vector_width<T>();
    T* di = act_mut<T>(dinp);
    const T *d = act<T>(dout), *x = act<T>(inp), *g = act<T>(w);
    if (C % kW == 0 && aligned16(di) && aligned16(d) && aligned16(x) && aligned16(g)) {
      launch<T, kW>(di, dw, db, d, x, g, mean, rstd, N, C, part_w, part_b, groups, ctx.stream);
      g_vector_calls.fetch_add(1, std::memory_order_relaxed);
    } else {
      launch<T, 1>(di, dw, db, d, x, g, mean, rstd, N, C, part_w, part_b, groups, ctx.stream);
    }
  });
}

}  // namespace loom::cuda
