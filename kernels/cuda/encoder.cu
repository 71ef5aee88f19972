// Token + position embedding. Forward: one thread per output element. Backward: dwpe summed
// over the batch in order (a thread per (t, c)); dwte by buckets of positions per token, each
// bucket summed in ascending position order by one block: deterministic, no float atomics. The
// buckets are built on the device (a stable radix sort of (row, position) pairs by row, then the
// runs of equal rows), so the backward never waits for the host: it used to copy the token ids
// back and sort them there, synchronising the stream every step. out, wte, wpe and dout in the
// compute dtype; dwte and dwpe fp32 (accumulated), sums in fp32.
#include <algorithm>

#include <cub/cub.cuh>

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
  // From the value already there, position by position, as the CPU reference adds: the same bits
  // when gradients accumulate over micro-batches.
  float s = dwpe[i];
  for (int b = 0; b < B; ++b) s += load(dout[size_t(b) * T * C + i]);
  dwpe[i] = s;
}

// Position p's sort key: its row of this rank's vocabulary slice, or vocab_rows for a token
// another tensor-parallel rank holds (those sort last and are skipped).
__global__ void encoder_bucket_keys_kernel(int32_t* keys, int32_t* positions, const int32_t* tokens, int n,
                                           int vocab_start, int vocab_rows) {
  const int p = int(blockIdx.x * blockDim.x + threadIdx.x);
  if (p >= n) return;
  const int row = tokens[p] - vocab_start;
  keys[p] = (row >= 0 && row < vocab_rows) ? row : vocab_rows;
  positions[p] = p;
}

// Block k sums run k of the sorted pairs (one row, its positions ascending: the radix sort is
// stable) into that row of dwte. The grid has one block per position, as many as runs can be;
// blocks past the number of runs (known only on the device) return at once.
template <typename Tp>
__global__ void encoder_backward_wte_kernel(float* dwte, const Tp* dout, const int32_t* run_rows,
                                            const int32_t* run_lengths, const int32_t* run_begins,
                                            const int32_t* num_runs, const int32_t* sorted_pos, int C,
                                            int vocab_rows) {
  const int k = blockIdx.x;
  if (k >= *num_runs || run_rows[k] >= vocab_rows) return;
  const int begin = run_begins[k], end = begin + run_lengths[k];
  float* dst = dwte + size_t(run_rows[k]) * C;
  for (int c = threadIdx.x; c < C; c += blockDim.x) {
    float s = dst[c];  // from the value there, in position order, as the CPU reference adds
    for (int p = begin; p < end; ++p) s += load(dout[size_t(sorted_pos[p]) * C + c]);
    dst[c] = s;
  }
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
  // Buckets on the device: keys (rows) and positions, sorted stably by row, then the runs of
  // equal rows and where each begins. Seven int arrays of N (plus the run count) in one buffer.
  const int N = B * T;
  if (N == 0) return;
  int32_t* buf = ctx.int_buffer(0, 7 * size_t(N) + 2);
  int32_t *keys = buf, *pos = keys + N, *sorted_keys = pos + N, *sorted_pos = sorted_keys + N;
  int32_t *run_rows = sorted_pos + N, *run_lengths = run_rows + N, *run_begins = run_lengths + N;
  int32_t* num_runs = run_begins + N;
  encoder_bucket_keys_kernel<<<blocks_for(size_t(N), 256), 256, 0, stream>>>(keys, pos, tokens, N, vocab_start,
                                                                             vocab_rows);
  LOOM_CUDA_LAUNCHED();
  // The key's significant bits only (rows <= vocab_rows): fewer radix passes.
  int end_bit = 1;
  while (end_bit < 31 && (1 << end_bit) <= vocab_rows) ++end_bit;
  size_t sort_bytes = 0, rle_bytes = 0, scan_bytes = 0;
  LOOM_CUDA_CHECK(cub::DeviceRadixSort::SortPairs(nullptr, sort_bytes, keys, sorted_keys, pos, sorted_pos, N, 0,
                                                  end_bit, stream));
  LOOM_CUDA_CHECK(cub::DeviceRunLengthEncode::Encode(nullptr, rle_bytes, sorted_keys, run_rows, run_lengths, num_runs,
                                                     N, stream));
  LOOM_CUDA_CHECK(cub::DeviceScan::ExclusiveSum(nullptr, scan_bytes, run_lengths, run_begins, N, stream));
  const Workspace ws = ctx.workspace(std::max(sort_bytes, std::max(rle_bytes, scan_bytes)));
  LOOM_CUDA_CHECK(cub::DeviceRadixSort::SortPairs(ws.ptr, sort_bytes, keys, sorted_keys, pos, sorted_pos, N, 0,
                                                  end_bit, stream));
  // The scan below reads all N lengths; those past the number of runs are zeros, not garbage
  // (harmless either way, but compute-sanitizer's initcheck would report it).
  LOOM_CUDA_CHECK(cudaMemsetAsync(run_lengths, 0, size_t(N) * sizeof(int32_t), stream));
  LOOM_CUDA_CHECK(cub::DeviceRunLengthEncode::Encode(ws.ptr, rle_bytes, sorted_keys, run_rows, run_lengths, num_runs,
                                                     N, stream));
  LOOM_CUDA_CHECK(cub::DeviceScan::ExclusiveSum(ws.ptr, scan_bytes, run_lengths, run_begins, N, stream));
  dispatch_act("encoder_backward", dt, [&](auto tag) {
    using Tp = decltype(tag);
    encoder_backward_wte_kernel<<<unsigned(N), 256, 0, stream>>>(dwte, act<Tp>(dout), run_rows, run_lengths,
                                                                 run_begins, num_runs, sorted_pos, C, vocab_rows);
  });
  LOOM_CUDA_LAUNCHED();
}

}  // namespace loom::cuda
