// Softmax cross-entropy over vocabulary-padded logits, fused with its gradient: one block per
// row, two passes over the row (the max and the sum of exponentials together, online, then the
// loss and the gradient written in place), so the probabilities are never stored. Rows that are
// 16-byte aligned are read and written 16 bytes at a time (8 bf16 values): the logits are the
// largest tensor of a GPT step (N x 50304), and with scalar 2-byte accesses and a pass each for
// the max and the sum this op took 2.3 ms for 8192 rows of GPT-2 on an H100. The vocab-parallel
// variant (three passes, one element at a time) splits the same computation at the two points
// where the tensor-parallel group must reduce (max, then sum and target logit). Padding columns never enter a max or a sum and get a zero gradient. Logits in
// the compute dtype (the gradient is written back in it), all softmax math, losses, maxes and
// partials in fp32.
#include <cfloat>
#include <cstdint>
#include <cstring>

#include "kernels/cuda/cuda_check.cuh"
#include "kernels/cuda/dtype.cuh"
#include "kernels/cuda/ops.cuh"

namespace loom::cuda {
namespace {

constexpr int kThreads = 256;

// Block-wide reduction (max or sum) of one value per thread; every thread gets the result.
template <bool kMax>
__device__ float block_reduce(float x) {
  __shared__ float shared[kThreads / 32];
  for (int o = 16; o > 0; o >>= 1) {
    const float y = __shfl_xor_sync(0xffffffffu, x, o);
    x = kMax ? fmaxf(x, y) : x + y;
  }
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  __syncthreads();  // shared may still be read by a previous call
  if (lane == 0) shared[warp] = x;
  __syncthreads();
  float r = kMax ? -INFINITY : 0.0f;
  for (int w = 0; w < kThreads / 32; ++w) r = kMax ? fmaxf(r, shared[w]) : r + shared[w];
  return r;
}

template <typename S>
__device__ float row_max(const S* row, int n) {
  float m = -INFINITY;
  for (int j = threadIdx.x; j < n; j += kThreads) m = fmaxf(m, load(row[j]));
  return block_reduce<true>(m);
}

template <typename S>
__device__ float row_sumexp(const S* row, int n, float mx) {
  float s = 0;
  for (int j = threadIdx.x; j < n; j += kThreads) s += expf(load(row[j]) - mx);
  return block_reduce<false>(s);
}

// Each element is read and then overwritten by the same thread.
template <typename S>
__device__ void write_grad(S* row, int v_real, int width, int target, float lse, float dloss) {
  for (int j = threadIdx.x; j < v_real; j += kThreads)
    row[j] = store<S>(dloss * (expf(load(row[j]) - lse) - (j == target ? 1.0f : 0.0f)));
  for (int j = v_real + threadIdx.x; j < width; j += kThreads) row[j] = store<S>(0.0f);
}

constexpr float kLog2e = 1.4426950408889634f;

// The running (max, sum of exp(x - max)) of a set of values, in base 2 inside (exp2f of a
// product with log2(e): one FFMA and one ex2 per element).
struct OnlineSum {
  float m = -INFINITY, s = 0.0f;
  __device__ void add(const float* x, int n) {
    float mx = m;
    for (int k = 0; k < n; ++k) mx = fmaxf(mx, x[k]);
    if (mx == -INFINITY) return;  // nothing but -inf so far
    s *= exp2f((m - mx) * kLog2e);
    m = mx;
    const float mb = mx * kLog2e;
    for (int k = 0; k < n; ++k) s += exp2f(fmaf(x[k], kLog2e, -mb));
  }
  __device__ void merge(float m2, float s2) {
    const float mx = fmaxf(m, m2);
    if (mx == -INFINITY) return;
    s = s * exp2f((m - mx) * kLog2e) + s2 * exp2f((m2 - mx) * kLog2e);
    m = mx;
  }
};

// The row's (max, sum) over the block, merged in a fixed order: every thread gets the result.
__device__ OnlineSum block_online_sum(OnlineSum o) {
  __shared__ float sm[kThreads / 32], ss[kThreads / 32];
  for (int d = 16; d > 0; d >>= 1) o.merge(__shfl_xor_sync(0xffffffffu, o.m, d), __shfl_xor_sync(0xffffffffu, o.s, d));
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  if (lane == 0) sm[warp] = o.m, ss[warp] = o.s;
  __syncthreads();
  OnlineSum r;
  for (int w = 0; w < kThreads / 32; ++w) r.merge(sm[w], ss[w]);
  return r;
}

// W: elements per access (16 bytes' worth when the row is 16-byte aligned, else 1).
template <typename S, int W>
__global__ void softmax_ce_kernel(float* losses, S* logits, const int32_t* targets, int V, int Vp, float dloss,
                                  bool grad) {
  S* row = logits + size_t(blockIdx.x) * Vp;
  OnlineSum o;
  const int full = V / W;  // whole accesses within the real columns; the rest one by one
  for (int i = threadIdx.x; i < full; i += kThreads) {
    float x[W];
    load_w<S, W>(x, row + size_t(i) * W);
    o.add(x, W);
  }
  for (int j = full * W + threadIdx.x; j < V; j += kThreads) {
    const float x = load(row[j]);
    o.add(&x, 1);
  }
  o = block_online_sum(o);
  const float lse = o.m + logf(o.s);
  const int t = targets[blockIdx.x];
  const float target_logit = load(row[t]);
  __syncthreads();  // every thread has read row[t] before any gradient overwrites it
  if (threadIdx.x == 0) losses[blockIdx.x] = lse - target_logit;
  if (!grad) return;
  const float lse2 = lse * kLog2e;
  for (int i = threadIdx.x; i < Vp / W; i += kThreads) {  // Vp is a multiple of W
    float x[W];
    load_w<S, W>(x, row + size_t(i) * W);
    for (int k = 0; k < W; ++k) {
      const int j = i * W + k;
      x[k] = j < V ? dloss * (exp2f(fmaf(x[k], kLog2e, -lse2)) - (j == t ? 1.0f : 0.0f)) : 0.0f;
    }
    store_w<S, W>(row + size_t(i) * W, x);
  }
}

template <typename S>
__global__ void ce_max_kernel(float* maxes, const S* logits, int Vl, int v_real) {
  const float m = row_max(logits + size_t(blockIdx.x) * Vl, v_real);
  if (threadIdx.x == 0) maxes[blockIdx.x] = m;
}

template <typename S>
__global__ void ce_partials_kernel(float* partials, const S* logits, const float* maxes, const int32_t* targets,
                                   int N, int Vl, int v_real, int vocab_start) {
  const S* row = logits + size_t(blockIdx.x) * Vl;
  const float s = v_real > 0 ? row_sumexp(row, v_real, maxes[blockIdx.x]) : 0.0f;
  if (threadIdx.x == 0) {
    const int t = targets[blockIdx.x] - vocab_start;
    partials[blockIdx.x] = s;
    partials[N + blockIdx.x] = (t >= 0 && t < v_real) ? load(row[t]) : 0.0f;
  }
}

template <typename S>
__global__ void ce_finish_kernel(float* losses, S* logits, const float* maxes, const float* partials,
                                 const int32_t* targets, int N, int Vl, int v_real, int vocab_start, float dloss,
                                 bool grad) {
  const int i = blockIdx.x;
  const float lse = maxes[i] + logf(partials[i]);
  if (threadIdx.x == 0) losses[i] = lse - partials[N + i];
  if (grad) write_grad(logits + size_t(i) * Vl, v_real, Vl, targets[i] - vocab_start, lse, dloss);
}

}  // namespace

void softmax_crossentropy(float* losses, TypedPtr logits, const int32_t* targets, int N, int V, int Vp, float dloss,
                          bool write_grad, Context& ctx) {
  const DType dt = act_dtype("softmax_crossentropy", logits);
  if (N == 0) return;
  dispatch_act("softmax_crossentropy", dt, [&](auto tag) {
    using S = decltype(tag);
    constexpr int kVec = vector_width<S>();
    S* p = act_mut<S>(logits);
    if (reinterpret_cast<uintptr_t>(p) % 16 == 0 && Vp % kVec == 0)
      softmax_ce_kernel<S, kVec><<<N, kThreads, 0, ctx.stream>>>(losses, p, targets, V, Vp, dloss, write_grad);
    else
      softmax_ce_kernel<S, 1><<<N, kThreads, 0, ctx.stream>>>(losses, p, targets, V, Vp, dloss, write_grad);
  });
  LOOM_CUDA_LAUNCHED();
}

void crossentropy_max(float* maxes, ConstTypedPtr logits, int N, int Vl, int v_real, Context& ctx) {
  const DType dt = act_dtype("crossentropy_max", logits);
  if (N == 0) return;
  dispatch_act("crossentropy_max", dt, [&](auto tag) {
    using S = decltype(tag);
    ce_max_kernel<<<N, kThreads, 0, ctx.stream>>>(maxes, act<S>(logits), Vl, v_real);
  });
  LOOM_CUDA_LAUNCHED();
}

void crossentropy_partials(float* partials, ConstTypedPtr logits, const float* maxes, const int32_t* targets, int N,
                           int Vl, int v_real, int vocab_start, Context& ctx) {
  const DType dt = act_dtype("crossentropy_partials", logits);
  if (N == 0) return;
  dispatch_act("crossentropy_partials", dt, [&](auto tag) {
    using S = decltype(tag);
    ce_partials_kernel<<<N, kThreads, 0, ctx.stream>>>(partials, act<S>(logits), maxes, targets, N, Vl, v_real,
                                                       vocab_start);
  });
  LOOM_CUDA_LAUNCHED();
}

void crossentropy_finish(float* losses, TypedPtr logits, const float* maxes, const float* partials,
                         const int32_t* targets, int N, int Vl, int v_real, int vocab_start, float dloss,
                         bool write_grad, Context& ctx) {
  const DType dt = act_dtype("crossentropy_finish", logits);
  if (N == 0) return;
  dispatch_act("crossentropy_finish", dt, [&](auto tag) {
    using S = decltype(tag);
    ce_finish_kernel<<<N, kThreads, 0, ctx.stream>>>(losses, act_mut<S>(logits), maxes, partials, targets, N, Vl,
                                                     v_real, vocab_start, dloss, write_grad);
  });
  LOOM_CUDA_LAUNCHED();
}

}  // namespace loom::cuda
