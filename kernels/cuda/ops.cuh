#pragma once
// The CUDA kernels of the backend, one op (forward and backward) per .cu file, matching the CPU
// reference op for op. One launcher per op of kernels/backend_ops.def (which has the contracts),
// declared here from that list: the op's own parameters, then the Context. Every launcher runs on ctx.stream; reductions are deterministic
// (fixed partitions, summed in a fixed order: no float atomics), so results do not change from
// run to run.
//
// Dtypes on this backend. "Act" = the call's compute dtype, fp32, bf16 or fp16 (kernels run on
// float, __nv_bfloat16 or __half storage, dtype.cuh), always with fp32 arithmetic and
// accumulation; a 16-bit result is rounded once, to nearest even, when stored:
//   zero               p: any dtype (a memset of n * dtype_size bytes)
//   encoder            out, wte, wpe, dout: Act;  dwte, dwpe: fp32, accumulated
//   layernorm          out, inp, w, b, dout, dinp: Act;  mean, rstd, dw, db: fp32
//   matmul             out, inp, w, bias, dout, dinp: Act (cuBLASLt, A/B in the compute dtype,
//                      CUBLAS_COMPUTE_32F);  dw (C = D fp32, beta 1) and dbias: fp32, accumulated
//   attention          qkv, out, dout, dqkv: Act;  saved = log-sum-exp (B,NH,T) fp32; scores,
//                      softmax and the backward's row sums in fp32 (the bf16/fp16 tensor-core
//                      kernels round P and dS to the compute dtype for their products)
//   gelu, residual     all Act
//   crossentropy (all) logits/dlogits: Act, read in place and overwritten in the same dtype;
//                      losses, maxes, partials: fp32
//   convert            dst, src: any of fp32, bf16, fp16
//   dequantize         out: Act;  codes: bytes (int8, or NF4 two per byte);  scales: fp32
//   adamw, scale, sum, sum_squares   fp32 only (master weights, gradients, moments)
#include <cublasLt.h>
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "kernels/dtype.hpp"

// Strips one pair of parentheses: LOOM_CUDA_UNPAREN (a, b) is a, b.
#define LOOM_CUDA_UNPAREN(...) __VA_ARGS__

namespace loom::cuda {

// Scratch memory the ops borrow (owned by the backend): `bytes` long, not preserved across calls.
struct Workspace {
  void* ptr = nullptr;
  size_t bytes = 0;
};

// What every op gets besides its own arguments: the stream it runs on, the cuBLASLt handle and
// the backend's scratch memory (defined in cuda_backend.cu). Owned by the CudaBackend.
class Context {
 public:
  cudaStream_t stream = nullptr;
  cublasLtHandle_t lt = nullptr;

  // At least `bytes` of scratch (and at least what it already had: the backend starts it at the
  // 32 MiB cuBLASLt likes), shared by all ops, not preserved across calls. Growing waits for the
  // stream: work in flight may still use the old buffer.
  Workspace workspace(size_t bytes);
  // Device buffer number `which` (0 .. kIntBuffers-1) of at least n int32s, kept until the next
  // call for the same `which` needs more. Growing waits for the stream.
  static constexpr int kIntBuffers = 3;
  int32_t* int_buffer(int which, size_t n);
  // Frees the scratch (the backend's destructor, after synchronising the stream).
  void free_scratch();

 private:
  void grow_workspace(size_t bytes);
  Workspace ws_;
  void* int_buffers_[kIntBuffers] = {};
  size_t int_capacity_[kIntBuffers] = {};
};

// The launchers take the Backend's run-time typed tensors (kernels/backend_op_types.inc): each
// reads the dtype of its Act tensors (dtype.cuh: act_dtype, one dtype per call, else a
// std::logic_error naming the op) and runs kernels templated on that storage type.
#define LOOM_OP(RET, NAME, PARAMS, ARGS) RET NAME(LOOM_CUDA_UNPAREN PARAMS, Context& ctx);
#include "kernels/backend_op_types.inc"
#include "kernels/backend_ops.def"

// Where a .cu file departs from the plain one-kernel pattern:
//   encoder.cu    backward buckets the positions by token on the device (CUB: stable radix sort,
//                 run-length encoding, scan), then sums each bucket in position order.
//   matmul.cu     cuBLASLt with fp32 compute, A/B in the compute dtype, dW in fp32; the bias
//                 gradient by deterministic column sums.
//   attention.cu  fused causal attention (online softmax; no T x T matrix in memory): `saved`
//                 holds the log-sum-exp of each (b, h, t) row, B * NH * T floats (fp32 in
//                 every compute dtype). Head sizes 64 and 128 go to the tiled kernels of
//                 flash_attention_fma.cu / flash_attention_mma.cu (flash_attention.cuh).
//   reduce.cu     sum and sum_squares in double over a fixed grid; they return the result, so
//                 they synchronise the stream.
//   layernorm.cu  backward: its own kernels, or layernorm_backward_vector (below) when
//                 layernorm_backward_kernels() (cuda_backend.hpp) says `vector`.

// layernorm_backward on the kernels of layernorm_backward_vec.cu (same contract).
void layernorm_backward_vector(TypedPtr dinp, float* dw, float* db, ConstTypedPtr dout, ConstTypedPtr inp,
                               ConstTypedPtr w, const float* mean, const float* rstd, int N, int C,
                               Context& ctx);

}  // namespace loom::cuda
