// KV-cache attention for generation (backend_ops.def: attention_cached). Two kernels: the new
// keys and values into the cache, then one thread block per (batch, head, new query): its
// threads score the cached keys into shared memory, a block-wide max and sum make the softmax
// (fp32), and each thread then sums the values for its output channels. Shared memory holds
// pos + Tq scores: 4 KB at a 1024-token context, past the default 48 KiB above ~12K tokens.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cfloat>
#include <stdexcept>
#include <string>

#include "kernels/cuda/cuda_check.cuh"
#include "kernels/cuda/dtype.cuh"
#include "kernels/cuda/ops.cuh"

namespace loom::cuda {
namespace {

constexpr int kThreads = 128;

template <typename T>
__global__ void kv_append_kernel(T* kcache, T* vcache, const T* qkv, int Tq, int pos, int Tmax, int C) {
  const int b = blockIdx.y, i = blockIdx.x;
  const T* row = qkv + (size_t(b) * Tq + i) * 3 * C;
  const size_t at = (size_t(b) * Tmax + pos + i) * C;
  for (int c = threadIdx.x; c < C; c += blockDim.x) {
    kcache[at + c] = row[C + c];
    vcache[at + c] = row[2 * C + c];
  }
}

// Block-wide reduction of one float (max or sum) over kThreads threads.
template <bool Max>
__device__ float block_reduce(float x, float* shared) {
  for (int o = 16; o > 0; o >>= 1) {
    const float y = __shfl_xor_sync(0xffffffffu, x, o);
    x = Max ? fmaxf(x, y) : x + y;
  }
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  if (lane == 0) shared[warp] = x;
  __syncthreads();
  x = shared[0];
  for (int w = 1; w < kThreads / 32; ++w) x = Max ? fmaxf(x, shared[w]) : x + shared[w];
  __syncthreads();  // shared is reused by the next reduction
  return x;
}

template <typename T>
__global__ void attention_cached_kernel(T* out, const T* kcache, const T* vcache, const T* qkv, int Tq, int pos,
                                        int Tmax, int C, int NH) {
  // One dynamic buffer: the reduction's per-warp slots, then pos + Tq scores (the kernel reads
  // only scores [0, keys); the launch sizes it for the longest row of the call).
  extern __shared__ float smem[];
  float* red = smem;
  float* score = smem + kThreads / 32;
  const int i = blockIdx.x, h = blockIdx.y, b = blockIdx.z;
  const int hs = C / NH, keys = pos + i + 1;
  const float scale = rsqrtf(float(hs));
  const T* q = qkv + (size_t(b) * Tq + i) * 3 * C + size_t(h) * hs;
  float local_max = -FLT_MAX;
  for (int t = threadIdx.x; t < keys; t += blockDim.x) {
    const T* k = kcache + (size_t(b) * Tmax + t) * C + size_t(h) * hs;
    float dot = 0.0f;
    for (int d = 0; d < hs; ++d) dot += load(q[d]) * load(k[d]);
    score[t] = dot * scale;
    local_max = fmaxf(local_max, score[t]);
  }
  const float maxv = block_reduce<true>(local_max, red);
  float local_sum = 0.0f;
  for (int t = threadIdx.x; t < keys; t += blockDim.x) local_sum += (score[t] = __expf(score[t] - maxv));
  const float inv = 1.0f / block_reduce<false>(local_sum, red);  // also orders the score writes
  for (int d = threadIdx.x; d < hs; d += blockDim.x) {
    float acc = 0.0f;
    for (int t = 0; t < keys; ++t) acc += score[t] * load(vcache[(size_t(b) * Tmax + t) * C + size_t(h) * hs + d]);
    out[(size_t(b) * Tq + i) * C + size_t(h) * hs + d] = store<T>(acc * inv);
  }
}

// Above the default 48 KiB of dynamic shared memory (a context past about 12K tokens) the kernel
// must be allowed more, up to the device's opt-in limit (227 KiB on an H100, 163 KiB on an A100:
// about 58K and 41K tokens); past it, an error naming the limit. Set on each such launch, not
// once per process: the attribute belongs to the current device's context.
template <typename K>
void allow_shared(K* kernel, size_t bytes, int context) {
  if (bytes <= size_t(48) << 10) return;
  int dev = 0, optin = 0;
  LOOM_CUDA_CHECK(cudaGetDevice(&dev));
  LOOM_CUDA_CHECK(cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev));
  if (bytes > size_t(optin))
    throw std::runtime_error("CUDA attention_cached: a context of " + std::to_string(context) + " tokens needs " +
                             std::to_string(bytes) + " bytes of shared memory per block; this device allows " +
                             std::to_string(optin) + " (about " +
                             std::to_string(optin / int(sizeof(float)) - kThreads / 32 - 4) + " tokens)");
  allow_dynamic_shared(kernel, bytes);
}

}  // namespace

void attention_cached(TypedPtr out, TypedPtr kcache, TypedPtr vcache, ConstTypedPtr qkv, int B, int Tq, int pos,
                      int Tmax, int C, int NH, Context& ctx) {
  const DType dt = act_dtype("attention_cached", out, kcache, vcache, qkv);
  if (B == 0 || Tq == 0) return;
  dispatch_act("attention_cached", dt, [&](auto tag) {
    using T = decltype(tag);
    kv_append_kernel<<<dim3(unsigned(Tq), unsigned(B)), kThreads, 0, ctx.stream>>>(
        act_mut<T>(kcache), act_mut<T>(vcache), act<T>(qkv), Tq, pos, Tmax, C);
    LOOM_CUDA_LAUNCHED();
    // + 4: the compiled weighted-sum loop reads scores three at a time and may read up to two
    // past the row's last (unused; compute-sanitizer's memcheck flagged it on an H100, sm_90).
    const size_t shared = (size_t(kThreads / 32) + size_t(pos + Tq) + 4) * sizeof(float);
    allow_shared(attention_cached_kernel<T>, shared, pos + Tq);
    attention_cached_kernel<<<dim3(unsigned(Tq), unsigned(NH), unsigned(B)), kThreads, shared, ctx.stream>>>(
        act_mut<T>(out), act_mut<T>(kcache), act_mut<T>(vcache), act<T>(qkv), Tq, pos, Tmax, C, NH);
    LOOM_CUDA_LAUNCHED();
  });
}

}  // namespace loom::cuda
