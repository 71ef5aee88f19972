// LayerNorm over the last dimension, eps 1e-5, biased variance (as torch and the CPU reference).
// Tensors in the compute dtype, mean/rstd and the dw/db sums in fp32; all arithmetic in fp32.
// Forward and the input gradient: one warp per row. Weight and bias gradients: rows split into
// kGroups fixed groups, each group's partial column sums written to the workspace, then summed
// over the groups in order: deterministic. LOOM_CUDA_LAYERNORM_BACKWARD=vector (or
// set_layernorm_backward_kernels) sends the backward to layernorm_backward_vec.cu instead.
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <string>

#include "kernels/cuda/cuda_backend.hpp"
#include "kernels/cuda/cuda_check.cuh"
#include "kernels/cuda/dtype.cuh"
#include "kernels/cuda/ops.cuh"
#include "kernels/cuda/warp_reduce.cuh"

namespace loom::cuda {
namespace {

constexpr int kGroups = 64;

template <typename T>
__global__ void layernorm_forward_kernel(T* out, float* mean, float* rstd, const T* inp, const T* w, const T* b,
                                         int N, int C) {
  const int row = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32, lane = threadIdx.x % 32;
  if (row >= N) return;
  const T* x = inp + size_t(row) * C;
  float s = 0;
  for (int c = lane; c < C; c += 32) s += load(x[c]);
  const float m = warp_sum(s) / C;
  float v = 0;
  for (int c = lane; c < C; c += 32) v += (load(x[c]) - m) * (load(x[c]) - m);
  const float r = rsqrtf(warp_sum(v) / C + 1e-5f);
  T* o = out + size_t(row) * C;
  for (int c = lane; c < C; c += 32) o[c] = store<T>((load(x[c]) - m) * r * load(w[c]) + load(b[c]));
  if (lane == 0) {
    mean[row] = m;
    rstd[row] = r;
  }
}

template <typename T>
__global__ void layernorm_dinp_kernel(T* dinp, const T* dout, const T* inp, const T* w, const float* mean,
                                      const float* rstd, int N, int C) {
  const int row = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32, lane = threadIdx.x % 32;
  if (row >= N) return;
  const T* x = inp + size_t(row) * C;
  const T* d = dout + size_t(row) * C;
  const float m = mean[row], r = rstd[row];
  float a = 0, bsum = 0;  // mean of dnorm, and of dnorm * norm
  for (int c = lane; c < C; c += 32) {
    const float dn = load(d[c]) * load(w[c]);
    a += dn;
    bsum += dn * (load(x[c]) - m) * r;
  }
  a = warp_sum(a) / C;
  bsum = warp_sum(bsum) / C;
  T* di = dinp + size_t(row) * C;
  for (int c = lane; c < C; c += 32) {
    const float norm = (load(x[c]) - m) * r;
    di[c] = store<T>(load(di[c]) + (load(d[c]) * load(w[c]) - a - norm * bsum) * r);
  }
}

// partial[g][c] = sums over the rows of group g (rows g, g + kGroups, ...) for column c.
template <typename T>
__global__ void layernorm_dwdb_partial_kernel(float* part_w, float* part_b, const T* dout, const T* inp,
                                              const float* mean, const float* rstd, int N, int C) {
  const int c = blockIdx.x * blockDim.x + threadIdx.x, g = blockIdx.y;
  if (c >= C) return;
  float sw = 0, sb = 0;
  for (int n = g; n < N; n += kGroups) {
    const float d = load(dout[size_t(n) * C + c]);
    sw += d * (load(inp[size_t(n) * C + c]) - mean[n]) * rstd[n];
    sb += d;
  }
  part_w[size_t(g) * C + c] = sw;
  part_b[size_t(g) * C + c] = sb;
}

__global__ void sum_groups_kernel(float* dw, float* db, const float* part_w, const float* part_b, int C) {
  const int c = blockIdx.x * blockDim.x + threadIdx.x;
  if (c >= C) return;
  float sw = 0, sb = 0;
  for (int g = 0; g < kGroups; ++g) {
    sw += part_w[size_t(g) * C + c];
    sb += part_b[size_t(g) * C + c];
  }
  dw[c] += sw;
  db[c] += sb;
}

// -1 until the first call reads LOOM_CUDA_LAYERNORM_BACKWARD, then a LayerNormBackwardKernels.
std::atomic<int> g_backward_kernels{-1};

}  // namespace

LayerNormBackwardKernels layernorm_backward_kernels() {
  int k = g_backward_kernels.load(std::memory_order_relaxed);
  if (k < 0) {
    const char* v = std::getenv("LOOM_CUDA_LAYERNORM_BACKWARD");
    if (!v || !*v || std::strcmp(v, "rows") == 0)
      k = int(LayerNormBackwardKernels::rows);
    else if (std::strcmp(v, "vector") == 0)
      k = int(LayerNormBackwardKernels::vector);
    else
      throw std::runtime_error(std::string("LOOM_CUDA_LAYERNORM_BACKWARD is '") + v +
                               "': expected 'rows' (the default) or 'vector'");
    int unset = -1;
    g_backward_kernels.compare_exchange_strong(unset, k);  // a set_ from another thread wins
    k = g_backward_kernels.load(std::memory_order_relaxed);
  }
  return LayerNormBackwardKernels(k);
}

void set_layernorm_backward_kernels(LayerNormBackwardKernels kernels) {
  g_backward_kernels.store(int(kernels), std::memory_order_relaxed);
}

void layernorm_forward(TypedPtr out, float* mean, float* rstd, ConstTypedPtr inp, ConstTypedPtr w, ConstTypedPtr b,
                       int N, int C, Context& ctx) {
  const DType dt = act_dtype("layernorm_forward", out, inp, w, b);
  if (N == 0) return;
  dispatch_act("layernorm_forward", dt, [&](auto tag) {
    using T = decltype(tag);
    layernorm_forward_kernel<<<blocks_for(size_t(N), 8), 256, 0, ctx.stream>>>(act_mut<T>(out), mean, rstd, act<T>(inp),
                                                                               act<T>(w), act<T>(b), N, C);
  });
  LOOM_CUDA_LAUNCHED();
}

void layernorm_backward(TypedPtr dinp, float* dw, float* db, ConstTypedPtr dout, ConstTypedPtr inp, ConstTypedPtr w,
                        const float* mean, const float* rstd, int N, int C, Context& ctx) {
  if (layernorm_backward_kernels() == LayerNormBackwardKernels::vector)
    return layernorm_backward_vector(dinp, dw, db, dout, inp, w, mean, rstd, N, C, ctx);
  const DType dt = act_dtype("layernorm_backward", dinp, dout, inp, w);
  const size_t need = size_t(2) * kGroups * C * sizeof(float);  // the partial sums of dw and db
  const Workspace ws = ctx.workspace(need);
  const cudaStream_t stream = ctx.stream;
  if (N == 0) return;
  if (ws.bytes < need)
    throw std::runtime_error("layernorm_backward: workspace too small");
  float* part_w = static_cast<float*>(ws.ptr);
  float* part_b = part_w + size_t(kGroups) * C;
  dispatch_act("layernorm_backward", dt, [&](auto tag) {
    using T = decltype(tag);
    layernorm_dinp_kernel<<<blocks_for(size_t(N), 8), 256, 0, stream>>>(act_mut<T>(dinp), act<T>(dout), act<T>(inp),
                                                                        act<T>(w), mean, rstd, N, C);
    LOOM_CUDA_LAUNCHED();
    if (!dw) return;  // a frozen LayerNorm: only the input gradient
    layernorm_dwdb_partial_kernel<<<dim3(blocks_for(size_t(C), 128), kGroups), 128, 0, stream>>>(
        part_w, part_b, act<T>(dout), act<T>(inp), mean, rstd, N, C);
    LOOM_CUDA_LAUNCHED();
  });
  if (!dw) return;
  sum_groups_kernel<<<blocks_for(size_t(C), 128), 128, 0, stream>>>(dw, db, part_w, part_b, C);
  LOOM_CUDA_LAUNCHED();
}

}  // namespace loom::cuda
