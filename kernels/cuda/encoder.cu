// Token + position embedding. Forward: one thread per output element. Backward: dwpe summed
// over the batch in order (a thread per (t, c)); dwte by buckets of positions per token, each
// bucket summed in ascending position order by one block: deterministic, no atomics.
#include "kernels/cuda/cuda_check.cuh"
#include "kernels/cuda/ops.cuh"

namespace loom::cuda {
namespace {

__global__ void encoder_forward_kernel(float* out, const int32_t* tokens, const float* wte, const float* wpe, int B,
                                       int T, int C, int vocab_start, int vocab_rows) {
  const size_t i = size_t(blockIdx.x) * blockDim.x + threadIdx.x;
  const size_t total = size_t(B) * T * C;
  if (i >= total) return;
  const size_t n = i / C;
  const int c = int(i % C), t = int(n % T);
  const int row = tokens[n] - vocab_start;
  float x = (row >= 0 && row < vocab_rows) ? wte[size_t(row) * C + c] : 0.0f;
  if (wpe) x += wpe[size_t(t) * C + c];
  out[i] = x;
}

__global__ void encoder_backward_wpe_kernel(float* dwpe, const float* dout, int B, int T, int C) {
  const size_t i = size_t(blockIdx.x) * blockDim.x + threadIdx.x;  // (t, c)
  if (i >= size_t(T) * C) return;
  float s = 0;
  for (int b = 0; b < B; ++b) s += dout[size_t(b) * T * C + i];
  dwpe[i] += s;
}

__global__ void encoder_backward_wte_kernel(float* dwte, const float* dout, const int32_t* bucket_row,
                                            const int32_t* bucket_begin, const int32_t* bucket_pos, int C) {
  const int k = blockIdx.x;
  const int begin = bucket_begin[k], end = bucket_begin[k + 1];
  float* dst = dwte + size_t(bucket_row[k]) * C;
  for (int c = threadIdx.x; c < C; c += blockDim.x) {
    float s = 0;
    for (int p = begin; p < end; ++p) s += dout[size_t(bucket_pos[p]) * C + c];
    dst[c] += s;
  }
}

}  // namespace

void encoder_forward(float* out, const int32_t* tokens, const float* wte, const float* wpe, int B, int T, int C,
                     int vocab_start, int vocab_rows, cudaStream_t stream) {
  const size_t n = size_t(B) * T * C;
  if (n == 0) return;
  encoder_forward_kernel<<<blocks_for(n, 256), 256, 0, stream>>>(out, tokens, wte, wpe, B, T, C, vocab_start,
                                                                 vocab_rows);
  LOOM_CUDA_LAUNCHED();
}

void encoder_backward_wpe(float* dwpe, const float* dout, int B, int T, int C, cudaStream_t stream) {
  const size_t n = size_t(T) * C;
  if (n == 0) return;
  encoder_backward_wpe_kernel<<<blocks_for(n, 256), 256, 0, stream>>>(dwpe, dout, B, T, C);
  LOOM_CUDA_LAUNCHED();
}

void encoder_backward_wte(float* dwte, const float* dout, const int32_t* bucket_row, const int32_t* bucket_begin,
                          const int32_t* bucket_pos, int buckets, int C, cudaStream_t stream) {
  if (buckets == 0) return;
  encoder_backward_wte_kernel<<<buckets, 256, 0, stream>>>(dwte, dout, bucket_row, bucket_begin, bucket_pos, C);
  LOOM_CUDA_LAUNCHED();
}

}  // namespace loom::cuda
