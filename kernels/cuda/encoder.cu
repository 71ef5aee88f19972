// Token + position embedding. Forward: one thread per output element. Backward: dwpe summed
// over the batch in order (a thread per (t, c)); dwte by buckets of positions per token, built
// on the host from the N token ids (small; reading them synchronises the stream), each bucket
// summed in ascending position order by one block: deterministic, no atomics. out, wte, wpe and
// dout in the compute dtype; dwte and dwpe fp32 (accumulated), sums in fp32.
#include <algorithm>
#include <numeric>
#include <vector>

#include "kernels/cuda/cuda_check.cuh"
#include "kernels/cuda/dtype.cuh"
#include "kernels/cuda/ops.cuh"

namespace loom::cuda {
namespace {

template <typename Tp>
__global__ void encoder_forward_kernel(Tp* out, const int32_t* tokens, const Tp* wte, const Tp* wpe, int B, int T,
                                       int C, int vocab_start, int vocab_rows) {
  const size_t i = size_t(blockIdx.x) * blockDim.x + threadIdx.x;
  const size_t total = size_t(B) * T * C;
  if (i >= total) return;
  const size_t n = i / C;
  const int c = int(i % C), t = int(n % T);
  const int row = tokens[n] - vocab_start;
  float x = (row >= 0 && row < vocab_rows) ? load(wte[size_t(row) * C + c]) : 0.0f;
  if (wpe) x += load(wpe[size_t(t) * C + c]);
  out[i] = store<Tp>(x);
}

template <typename Tp>
__global__ void encoder_backward_wpe_kernel(float* dwpe, const Tp* dout, int B, int T, int C) {
  const size_t i = size_t(blockIdx.x) * blockDim.x + threadIdx.x;  // (t, c)
  if (i >= size_t(T) * C) return;
  float s = 0;
  for (int b = 0; b < B; ++b) s += load(dout[size_t(b) * T * C + i]);
  dwpe[i] += s;
}

template <typename Tp>
__global__ void encoder_backward_wte_kernel(float* dwte, const Tp* dout, const int32_t* bucket_row,
                                            const int32_t* bucket_begin, const int32_t* bucket_pos, int C) {
  const int k = blockIdx.x;
  const int begin = bucket_begin[k], end = bucket_begin[k + 1];
  float* dst = dwte + size_t(bucket_row[k]) * C;
  for (int c = threadIdx.x; c < C; c += blockDim.x) {
    float s = 0;
    for (int p = begin; p < end; ++p) s += load(dout[size_t(bucket_pos[p]) * C + c]);
    dst[c] += s;
  }
}

// Host to device, waiting for the copy (the host vector may be reused on return).
void upload(int32_t* dst, const std::vector<int32_t>& src, cudaStream_t stream) {
  if (src.empty()) return;
  LOOM_CUDA_CHECK(cudaMemcpyAsync(dst, src.data(), src.size() * sizeof(int32_t), cudaMemcpyHostToDevice, stream));
  LOOM_CUDA_CHECK(cudaStreamSynchronize(stream));
}

}  // namespace

void encoder_forward(TypedPtr out, const int32_t* tokens, ConstTypedPtr wte, ConstTypedPtr wpe, int B, int T, int C,
                     int vocab_start, int vocab_rows, Context& ctx) {
  const DType dt = act_dtype("encoder_forward", out, wte, wpe);
  const size_t n = size_t(B) * T * C;
  if (n == 0) return;
  dispatch_act("encoder_forward", dt, [&](auto tag) {
    using Tp = decltype(tag);
    encoder_forward_kernel<<<blocks_for(n, 256), 256, 0, ctx.stream>>>(act_mut<Tp>(out), tokens, act<Tp>(wte),
                                                                       act<Tp>(wpe), B, T, C, vocab_start, vocab_rows);
  });
  LOOM_CUDA_LAUNCHED();
}

void encoder_backward(float* dwte, float* dwpe, ConstTypedPtr dout, const int32_t* tokens, int B, int T, int C,
                      int vocab_start, int vocab_rows, Context& ctx) {
  const DType dt = act_dtype("encoder_backward", dout);
  const cudaStream_t stream = ctx.stream;
  if (dwpe && size_t(T) * C > 0) {
    dispatch_act("encoder_backward", dt, [&](auto tag) {
      using Tp = decltype(tag);
      encoder_backward_wpe_kernel<<<blocks_for(size_t(T) * C, 256), 256, 0, stream>>>(dwpe, act<Tp>(dout), B, T, C);
    });
    LOOM_CUDA_LAUNCHED();
  }
  // Buckets of positions per in-range token, on the host (N ints), positions ascending within
  // a bucket: the device sums each bucket in that order.
  const int N = B * T;
  std::vector<int32_t> tok(static_cast<size_t>(N));
  LOOM_CUDA_CHECK(cudaMemcpyAsync(tok.data(), tokens, size_t(N) * sizeof(int32_t), cudaMemcpyDeviceToHost, stream));
  LOOM_CUDA_CHECK(cudaStreamSynchronize(stream));
  std::vector<int32_t> order(static_cast<size_t>(N));
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int32_t a, int32_t b) { return tok[size_t(a)] < tok[size_t(b)]; });
  std::vector<int32_t> rows, begins, positions;
  for (int32_t p : order) {
    const int32_t r = tok[size_t(p)] - vocab_start;
    if (r < 0 || r >= vocab_rows) continue;
    if (rows.empty() || rows.back() != r) {
      rows.push_back(r);
      begins.push_back(int32_t(positions.size()));
    }
    positions.push_back(p);
  }
  begins.push_back(int32_t(positions.size()));
  if (rows.empty()) return;
  int32_t* d_rows = ctx.int_buffer(0, rows.size());
  int32_t* d_begins = ctx.int_buffer(1, begins.size());
  int32_t* d_pos = ctx.int_buffer(2, positions.size());
  upload(d_rows, rows, stream);
  upload(d_begins, begins, stream);
  upload(d_pos, positions, stream);
  dispatch_act("encoder_backward", dt, [&](auto tag) {
    using Tp = decltype(tag);
    encoder_backward_wte_kernel<<<unsigned(rows.size()), 256, 0, stream>>>(dwte, act<Tp>(dout), d_rows, d_begins,
                                                                           d_pos, C);
  });
  LOOM_CUDA_LAUNCHED();
  LOOM_CUDA_CHECK(cudaStreamSynchronize(stream));  // the host vectors die here
}

}  // namespace loom::cuda
