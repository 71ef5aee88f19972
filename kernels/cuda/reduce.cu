// Sum and sum of squares of a flat buffer in double, deterministic: a fixed grid of
// kReduceBlocks blocks, each summing a fixed strided subset in a fixed order (tree within the
// block), then one block adding the partials in block order. The same input gives the same
// bits on every run (the gradient norm decides clipping and must not wobble).
#include "kernels/cuda/cuda_check.cuh"
#include "kernels/cuda/ops.cuh"

namespace loom::cuda {
namespace {

constexpr int kReduceBlocks = 256;
constexpr int kThreads = 256;

template <bool kSquares>
__global__ void partial_sums_kernel(double* partials, const float* x, size_t n) {
  __shared__ double shared[kThreads];
  double s = 0;
  for (size_t i = size_t(blockIdx.x) * kThreads + threadIdx.x; i < n; i += size_t(gridDim.x) * kThreads) {
    const double v = x[i];
    s += kSquares ? v * v : v;
  }
  shared[threadIdx.x] = s;
  __syncthreads();
  for (int w = kThreads / 2; w > 0; w >>= 1) {
    if (threadIdx.x < w) shared[threadIdx.x] += shared[threadIdx.x + w];
    __syncthreads();
  }
  if (threadIdx.x == 0) partials[blockIdx.x] = shared[0];
}

__global__ void finish_kernel(double* out, const double* partials, int count) {
  if (threadIdx.x != 0) return;
  double s = 0;
  for (int i = 0; i < count; ++i) s += partials[i];
  *out = s;
}

// The sum (of squares) of x[0, n) in double; needs ws of kReduceBlocks + 1 doubles. Returns the
// result, so it synchronises the stream.
double reduce(const float* x, size_t n, bool squares, Workspace ws, cudaStream_t stream) {
  if (n == 0) return 0.0;
  if (ws.bytes < (kReduceBlocks + 1) * sizeof(double)) throw std::runtime_error("sum: workspace too small");
  double* partials = static_cast<double*>(ws.ptr);
  if (squares)
    partial_sums_kernel<true><<<kReduceBlocks, kThreads, 0, stream>>>(partials, x, n);
  else
    partial_sums_kernel<false><<<kReduceBlocks, kThreads, 0, stream>>>(partials, x, n);
  LOOM_CUDA_LAUNCHED();
  finish_kernel<<<1, 32, 0, stream>>>(partials + kReduceBlocks, partials, kReduceBlocks);
  LOOM_CUDA_LAUNCHED();
  double result = 0;
  LOOM_CUDA_CHECK(cudaMemcpyAsync(&result, partials + kReduceBlocks, sizeof result, cudaMemcpyDeviceToHost, stream));
  LOOM_CUDA_CHECK(cudaStreamSynchronize(stream));
  return result;
}

}  // namespace

double sum_squares(const float* x, size_t n, Context& ctx) {
  return reduce(x, n, true, ctx.workspace((kReduceBlocks + 1) * sizeof(double)), ctx.stream);
}

double sum(const float* x, size_t n, Context& ctx) {
  return reduce(x, n, false, ctx.workspace((kReduceBlocks + 1) * sizeof(double)), ctx.stream);
}

}  // namespace loom::cuda
