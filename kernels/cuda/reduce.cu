// Sum and sum of squares of a flat buffer in double, deterministic: a fixed grid of
// kReduceBlocks blocks, each summing a fixed strided subset in a fixed order (tree within the
// block), then one block adding the partials in a fixed order. The same input gives the same
// bits on every run (the gradient norm decides clipping and must not wobble).
#include "kernels/cuda/cuda_check.cuh"
#include "kernels/cuda/ops.cuh"

namespace loom::cuda {
namespace {

// 1024 blocks of 256 threads reading float4s: enough loads in flight to run at the memory's
// speed (256 blocks of scalar loads reached 650 GB/s on an H100, a quarter of it).
constexpr int kReduceBlocks = 1024;
constexpr int kThreads = 256;

template <bool kSquares>
__device__ __forceinline__ double term(float v) {
  const double d = v;
  return kSquares ? d * d : d;
}

// Block b's partial: thread i of the grid sums elements (or float4s, when x is 16-byte aligned)
// i, i + grid, ... in order, then the block adds its threads' sums as a fixed tree. The order
// depends only on n and x's alignment, never on timing.
template <bool kSquares>
__global__ void partial_sums_kernel(double* partials, const float* x, size_t n) {
  __shared__ double shared[kThreads];
  double s = 0;
  const size_t first = size_t(blockIdx.x) * kThreads + threadIdx.x, step = size_t(gridDim.x) * kThreads;
  size_t tail = 0;
  if (reinterpret_cast<uintptr_t>(x) % 16 == 0) {
    const float4* x4 = reinterpret_cast<const float4*>(x);
    const size_t n4 = n / 4;
    for (size_t i = first; i < n4; i += step) {
      const float4 v = x4[i];
      s += term<kSquares>(v.x) + term<kSquares>(v.y) + term<kSquares>(v.z) + term<kSquares>(v.w);
    }
    tail = n4 * 4;
  }
  for (size_t i = tail + first; i < n; i += step) s += term<kSquares>(x[i]);
  shared[threadIdx.x] = s;
  __syncthreads();
  for (int w = kThreads / 2; w > 0; w >>= 1) {
    if (threadIdx.x < w) shared[threadIdx.x] += shared[threadIdx.x + w];
    __syncthreads();
  }
  if (threadIdx.x == 0) partials[blockIdx.x] = shared[0];
}

// One block: thread i adds partials i, i + kThreads, ... in order, then the same fixed tree.
__global__ void finish_kernel(double* out, const double* partials, int count) {
  __shared__ double shared[kThreads];
  double s = 0;
  for (int i = int(threadIdx.x); i < count; i += kThreads) s += partials[i];
  shared[threadIdx.x] = s;
  __syncthreads();
  for (int w = kThreads / 2; w > 0; w >>= 1) {
    if (threadIdx.x < w) shared[threadIdx.x] += shared[threadIdx.x + w];
    __syncthreads();
  }
  if (threadIdx.x == 0) *out = shared[0];
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
  finish_kernel<<<1, kThreads, 0, stream>>>(partials + kReduceBlocks, partials, kReduceBlocks);
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
