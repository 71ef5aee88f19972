#pragma once
// The CUDA kernels of the backend, one op (forward and backward) per .cu file. fp32 storage and
// accumulation, matching the CPU reference op for op (kernels/backend.hpp has the contracts).
// Every launcher runs on `stream`; reductions are deterministic (fixed partitions, summed in a
// fixed order: no float atomics), so results do not change from run to run.
#include <cublasLt.h>
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

namespace loom::cuda {

// Scratch memory the ops borrow (owned by the backend): `bytes` long, not preserved across calls.
struct Workspace {
  void* ptr = nullptr;
  size_t bytes = 0;
};

// encoder.cu. Backward buckets the positions by token on the host (tokens are small and
// already there for the data loader); bucket_* describe the buckets on the device.
void encoder_forward(float* out, const int32_t* tokens, const float* wte, const float* wpe, int B, int T, int C,
                     int vocab_start, int vocab_rows, cudaStream_t stream);
void encoder_backward_wpe(float* dwpe, const float* dout, int B, int T, int C, cudaStream_t stream);
// For each bucket k: dwte[bucket_row[k]] += sum over positions bucket_pos[bucket_begin[k] ..
// bucket_begin[k+1]) of dout[pos], in that (ascending) order.
void encoder_backward_wte(float* dwte, const float* dout, const int32_t* bucket_row, const int32_t* bucket_begin,
                          const int32_t* bucket_pos, int buckets, int C, cudaStream_t stream);

// layernorm.cu
void layernorm_forward(float* out, float* mean, float* rstd, const float* inp, const float* w, const float* b, int N,
                       int C, cudaStream_t stream);
void layernorm_backward(float* dinp, float* dw, float* db, const float* dout, const float* inp, const float* w,
                        const float* mean, const float* rstd, int N, int C, Workspace ws, cudaStream_t stream);

// matmul.cu (cuBLASLt, fp32 compute) and the bias gradient (deterministic column sums).
void matmul_forward(cublasLtHandle_t lt, Workspace ws, float* out, const float* inp, const float* w,
                    const float* bias, int N, int C, int OC, cudaStream_t stream);
void matmul_backward(cublasLtHandle_t lt, Workspace ws, float* dinp, float* dw, float* dbias, const float* dout,
                     const float* inp, const float* w, int N, int C, int OC, cudaStream_t stream);
// out (cols) += column sums of x (rows, cols), in a fixed order. Needs ws of cols * 64 floats.
void column_sums_add(float* out, const float* x, int rows, int cols, Workspace ws, cudaStream_t stream);

// attention.cu: fused causal attention (online softmax; no T x T matrix in memory). saved holds
// the log-sum-exp of each (b, h, t) row: B * NH * T floats.
void attention_forward(float* out, float* lse, const float* qkv, int B, int T, int C, int NH, cudaStream_t stream);
void attention_backward(float* dqkv, const float* dout, const float* qkv, const float* out, const float* lse, int B,
                        int T, int C, int NH, Workspace ws, cudaStream_t stream);

// elementwise.cu
void gelu_forward(float* out, const float* inp, size_t n, cudaStream_t stream);
void gelu_backward(float* dinp, const float* inp, const float* dout, size_t n, cudaStream_t stream);
void residual_forward(float* out, const float* a, const float* b, size_t n, cudaStream_t stream);
void scale(float* x, size_t n, float s, cudaStream_t stream);
void adamw_update(float* param, const float* grad, float* m, float* v, size_t n, float lr, float beta1, float beta2,
                  float eps, float weight_decay, int64_t t, cudaStream_t stream);

// crossentropy.cu
void softmax_crossentropy(float* losses, float* logits, const int32_t* targets, int N, int V, int Vp, float dloss,
                          bool write_grad, cudaStream_t stream);
void crossentropy_max(float* maxes, const float* logits, int N, int Vl, int v_real, cudaStream_t stream);
void crossentropy_partials(float* partials, const float* logits, const float* maxes, const int32_t* targets, int N,
                           int Vl, int v_real, int vocab_start, cudaStream_t stream);
void crossentropy_finish(float* losses, float* logits, const float* maxes, const float* partials,
                         const int32_t* targets, int N, int Vl, int v_real, int vocab_start, float dloss,
                         bool write_grad, cudaStream_t stream);

// reduce.cu: sum and sum of squares in double, deterministic (fixed grid, partials summed in
// order). Needs ws of kReduceBlocks doubles + 1; returns the result (synchronises the stream).
constexpr int kReduceBlocks = 256;
double sum(const float* x, size_t n, bool squares, Workspace ws, cudaStream_t stream);

}  // namespace loom::cuda
