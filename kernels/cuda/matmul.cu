// Linear layers through cuBLASLt with fp32 compute (CUBLAS_COMPUTE_32F, fp32 alpha/beta: no TF32,
// so fp32 results follow the fp32 CPU reference within fp32 rounding). A and B are in the call's
// compute dtype (fp32, bf16 or fp16); the forward output, its bias and dinp too; dW is fp32 and
// accumulated (C = D fp32, beta = 1). The type combinations used, all in cuBLASLt's table of
// supported cublasLtMatmul() types for computeType CUBLAS_COMPUTE_32F, scaleType CUDA_R_32F
// (https://docs.nvidia.com/cuda/cublas/index.html#cublasltmatmul, "Datatypes Supported"; also
// https://docs.nvidia.com/cuda/archive/12.2.2/cublas/index.html):
//   A/B CUDA_R_32F  C/D CUDA_R_32F                       (fp32 run)
//   A/B CUDA_R_16BF C/D CUDA_R_16BF or CUDA_R_32F        (bf16 run: forward/dinp, dW)
//   A/B CUDA_R_16F  C/D CUDA_R_16F  or CUDA_R_32F        (fp16 run: forward/dinp, dW)
// The bias epilogue's vector has the type of D unless CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE says
// otherwise (cublasLt.h), i.e. the compute dtype: the forward bias is an Act tensor.
// Row-major tensors are read as their column-major transposes:
//   out (N,OC) = inp (N,C) @ W^T        is  out^T (OC,N) = W^T... i.e. D = op_T(W) * inp^T
//   dinp (N,C) = dout @ W               is  dinp^T (C,N) = W(C,OC col-major) * dout^T
//   dW (OC,C) += dout^T @ inp           is  dW^T (C,OC) += inp^T (C,N) * dout (N,OC)
// The bias gradient is a deterministic column sum of dout (read in the compute dtype, summed in
// fp32) added to the fp32 dbias (column_sums_add).
// The MLP's GELU rides on cuBLASLt's epilogues in 16-bit runs (llm.c does the same):
// GELU_AUX[_BIAS] writes gelu(acc + bias) to D and acc + bias to the aux matrix (the pre-
// activation the backward needs), DGELU multiplies dinp by gelu'(aux) before its one rounding.
// That saves the separate GELU kernels' pass over the N x 4C activations (forward and backward).
// fp32 runs keep the separate kernels: cuBLASLt's GELU need not be the fp32 reference's tanh to
// fp32 precision, and fp32 runs are the reference. LOOM_CUDA_GELU_EPILOGUE=0 turns the fusion off
// (to measure it); a shape or alignment the epilogues cannot take falls back to the two ops.
#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <initializer_list>
#include <string>

#include "kernels/cuda/cuda_backend.hpp"
#include "kernels/cuda/cuda_check.cuh"
#include "kernels/cuda/dtype.cuh"
#include "kernels/cuda/ops.cuh"

namespace loom::cuda {
namespace {

// The largest power of two (<= 256, >= 2) the address is aligned to. Weights and gradients are
// views into one flat buffer, so they are often only 4-byte aligned; cuBLASLt assumes 256 unless
// told, and could pick a kernel that needs more.
uint32_t alignment_of(const void* p) {
  uint32_t a = 256;
  while (a > 2 && reinterpret_cast<uintptr_t>(p) % a) a /= 2;  // fp32 pointers stop at 4 or above
  return a;
}

// The heuristic always gets the same workspace limit, so that the algorithm chosen for a shape
// (and with it the bits of the result) does not change when the backend's scratch grows.
constexpr size_t kGemmWorkspace = size_t(32) << 20;

template <typename S>
__global__ void broadcast_bias_kernel(S* D, const S* bias, int m, int n) {
  const size_t i = size_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < size_t(m) * n) D[i] = bias[i % size_t(m)];
}

// The descriptors of one cublasLtMatmul call, destroyed on every way out of gemm (a failed check
// throws, and the backend lives on: a caller may catch it and carry on).
struct LtDescriptors {
  cublasLtMatmulDesc_t op = nullptr;
  cublasLtMatrixLayout_t la = nullptr, lb = nullptr, ld = nullptr;
  cublasLtMatmulPreference_t pref = nullptr;
  LtDescriptors() = default;
  LtDescriptors(const LtDescriptors&) = delete;
  LtDescriptors& operator=(const LtDescriptors&) = delete;
  ~LtDescriptors() {
    if (pref) cublasLtMatmulPreferenceDestroy(pref);
    for (cublasLtMatrixLayout_t l : {ld, lb, la})
      if (l) cublasLtMatrixLayoutDestroy(l);
    if (op) cublasLtMatmulDescDestroy(op);
  }
};

std::atomic<size_t> g_gelu_epilogue_matmuls{0};  // gelu_epilogue_matmuls()

// A GELU epilogue and its aux matrix (m x n, ld m, of D's type): the pre-activation written by
// the forward, read by the backward.
enum class Gelu { None, Forward, Backward };
struct GeluAux {
  Gelu mode = Gelu::None;
  const void* aux = nullptr;
};

// D (m x n, column-major, ld m) = alpha * op(A) * op(B) + beta * D [+ bias (m) broadcast over
// columns], fp32 compute. A and B of storage type S; D (and C, which is D) of type DT; the bias
// (only with DT = S) of type DT. With a GELU epilogue (the caller has checked the bias and aux
// are 16-byte aligned and m a multiple of 8), returns false without running anything when
// cuBLASLt has no algorithm for it; without, that throws.
template <typename S, typename DT>
bool gemm(cublasLtHandle_t lt, Workspace ws, DT* D, const S* A, bool transA, int lda, const S* B, bool transB,
          int ldb, int m, int n, int k, float beta, const DT* bias, cudaStream_t stream, GeluAux gelu = {}) {
  if (bias && reinterpret_cast<uintptr_t>(bias) % 16 != 0) {
    if (gelu.mode != Gelu::None) return false;
    // The bias epilogue needs a 16-byte aligned vector: otherwise write the bias into D first
    // and accumulate the product onto it.
    broadcast_bias_kernel<<<blocks_for(size_t(m) * n, 256), 256, 0, stream>>>(D, bias, m, n);
    LOOM_CUDA_LAUNCHED();
    bias = nullptr;
    beta = 1.0f;
  }
  constexpr cudaDataType_t ab_type = cuda_type_of<S>(), d_type = cuda_type_of<DT>();
  LtDescriptors d;
  LOOM_CUDA_CHECK(cublasLtMatmulDescCreate(&d.op, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  const cublasOperation_t ta = transA ? CUBLAS_OP_T : CUBLAS_OP_N, tb = transB ? CUBLAS_OP_T : CUBLAS_OP_N;
  LOOM_CUDA_CHECK(cublasLtMatmulDescSetAttribute(d.op, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta));
  LOOM_CUDA_CHECK(cublasLtMatmulDescSetAttribute(d.op, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof tb));
  cublasLtEpilogue_t epi = bias ? CUBLASLT_EPILOGUE_BIAS : CUBLASLT_EPILOGUE_DEFAULT;
  if (gelu.mode == Gelu::Forward) epi = bias ? CUBLASLT_EPILOGUE_GELU_AUX_BIAS : CUBLASLT_EPILOGUE_GELU_AUX;
  if (gelu.mode == Gelu::Backward) epi = CUBLASLT_EPILOGUE_DGELU;  // no bias: dbias is column_sums_add's
  if (epi != CUBLASLT_EPILOGUE_DEFAULT)
    LOOM_CUDA_CHECK(cublasLtMatmulDescSetAttribute(d.op, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof epi));
  if (bias)
    LOOM_CUDA_CHECK(cublasLtMatmulDescSetAttribute(d.op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof bias));
  if (gelu.mode != Gelu::None) {
    const int64_t aux_ld = m;
    LOOM_CUDA_CHECK(
        cublasLtMatmulDescSetAttribute(d.op, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, &gelu.aux, sizeof gelu.aux));
    LOOM_CUDA_CHECK(cublasLtMatmulDescSetAttribute(d.op, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, &aux_ld, sizeof aux_ld));
  }
  // Stored shapes (rows x cols, column-major) of A and B before op().
  LOOM_CUDA_CHECK(cublasLtMatrixLayoutCreate(&d.la, ab_type, transA ? k : m, transA ? m : k, lda));
  LOOM_CUDA_CHECK(cublasLtMatrixLayoutCreate(&d.lb, ab_type, transB ? n : k, transB ? k : n, ldb));
  LOOM_CUDA_CHECK(cublasLtMatrixLayoutCreate(&d.ld, d_type, m, n, m));
  LOOM_CUDA_CHECK(cublasLtMatmulPreferenceCreate(&d.pref));
  const size_t limit = std::min(ws.bytes, kGemmWorkspace);
  LOOM_CUDA_CHECK(cublasLtMatmulPreferenceSetAttribute(d.pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &limit,
                                                       sizeof limit));
  const uint32_t align_a = alignment_of(A), align_b = alignment_of(B), align_d = alignment_of(D);
  LOOM_CUDA_CHECK(cublasLtMatmulPreferenceSetAttribute(d.pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &align_a,
                                                       sizeof align_a));
  LOOM_CUDA_CHECK(cublasLtMatmulPreferenceSetAttribute(d.pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &align_b,
                                                       sizeof align_b));
  LOOM_CUDA_CHECK(cublasLtMatmulPreferenceSetAttribute(d.pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &align_d,
                                                       sizeof align_d));
  LOOM_CUDA_CHECK(cublasLtMatmulPreferenceSetAttribute(d.pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &align_d,
                                                       sizeof align_d));
  cublasLtMatmulHeuristicResult_t heur{};
  int found = 0;
  LOOM_CUDA_CHECK(cublasLtMatmulAlgoGetHeuristic(lt, d.op, d.la, d.lb, d.ld, d.ld, d.pref, 1, &heur, &found));
  if (found == 0 && gelu.mode != Gelu::None) return false;
  if (found == 0)
    throw std::runtime_error(std::string("cuBLASLt: no algorithm for this matmul (A/B ") +
                             dtype_name(dtype_of_storage<S>()) + ", D " + dtype_name(dtype_of_storage<DT>()) + ", m " +
                             std::to_string(m) + " n " + std::to_string(n) + " k " + std::to_string(k) + ")");
  const float alpha = 1.0f;
  LOOM_CUDA_CHECK(
      cublasLtMatmul(lt, d.op, &alpha, A, d.la, B, d.lb, &beta, D, d.ld, D, d.ld, &heur.algo, ws.ptr, limit, stream));
  if (gelu.mode != Gelu::None) g_gelu_epilogue_matmuls.fetch_add(1, std::memory_order_relaxed);
  return true;
}

// Whether a GELU epilogue may take this call: a 16-bit compute dtype, the fusion not turned off,
// the aux matrix's leading dimension (the layer's width) a multiple of 8 and every given pointer
// 16-byte aligned (cublasLt.h's conditions for the aux matrix; the bias epilogue's for the bias).
bool gelu_epilogue_takes(DType dt, int width, std::initializer_list<const void*> pointers) {
  static const bool enabled = [] {
    const char* v = std::getenv("LOOM_CUDA_GELU_EPILOGUE");
    return !(v && std::strcmp(v, "0") == 0);
  }();
  if (!enabled || dt == DType::f32 || width % 8 != 0) return false;
  for (const void* p : pointers)
    if (reinterpret_cast<uintptr_t>(p) % 16 != 0) return false;
  return true;
}

constexpr int kColGroups = 64;

template <typename S>
__global__ void column_partial_kernel(float* part, const S* x, int rows, int cols) {
  const int c = blockIdx.x * blockDim.x + threadIdx.x, g = blockIdx.y;
  if (c >= cols) return;
  float s = 0;
  for (int r = g; r < rows; r += kColGroups) s += load(x[size_t(r) * cols + c]);
  part[size_t(g) * cols + c] = s;
}

__global__ void column_finish_kernel(float* out, const float* part, int cols) {
  const int c = blockIdx.x * blockDim.x + threadIdx.x;
  if (c >= cols) return;
  float s = 0;
  for (int g = 0; g < kColGroups; ++g) s += part[size_t(g) * cols + c];
  out[c] += s;
}

// out (cols) += column sums of x (rows, cols), in a fixed order. Needs ws of cols * 64 floats.
template <typename S>
void column_sums_add(float* out, const S* x, int rows, int cols, Workspace ws, cudaStream_t stream) {
  if (rows == 0 || cols == 0) return;
  if (ws.bytes < size_t(kColGroups) * cols * sizeof(float)) throw std::runtime_error("column_sums_add: workspace too small");
  float* part = static_cast<float*>(ws.ptr);
  column_partial_kernel<<<dim3(blocks_for(size_t(cols), 128), kColGroups), 128, 0, stream>>>(part, x, rows, cols);
  LOOM_CUDA_LAUNCHED();
  column_finish_kernel<<<blocks_for(size_t(cols), 128), 128, 0, stream>>>(out, part, cols);
  LOOM_CUDA_LAUNCHED();
}

}  // namespace

void matmul_forward(TypedPtr out, ConstTypedPtr inp, ConstTypedPtr w, ConstTypedPtr bias, int N, int C, int OC,
                    Context& ctx) {
  const DType dt = act_dtype("matmul_forward", out, inp, w, bias);
  const Workspace ws = ctx.workspace(0);
  const cudaStream_t stream = ctx.stream;
  if (N == 0 || OC == 0) return;
  dispatch_act("matmul_forward", dt, [&](auto tag) {
    using S = decltype(tag);
    gemm<S, S>(ctx.lt, ws, act_mut<S>(out), act<S>(w), /*transA=*/true, C, act<S>(inp), /*transB=*/false, C, OC, N, C,
               0.0f, act<S>(bias), stream);
  });
}

void matmul_backward(TypedPtr dinp, float* dw, float* dbias, ConstTypedPtr dout, ConstTypedPtr inp, ConstTypedPtr w,
                     int N, int C, int OC, Context& ctx) {
  const DType dt = act_dtype("matmul_backward", dinp, dout, inp, w);
  const Workspace ws = ctx.workspace(size_t(kColGroups) * OC * sizeof(float));  // column_sums_add
  const cudaStream_t stream = ctx.stream;
  const cublasLtHandle_t lt = ctx.lt;
  if (N == 0) return;
  dispatch_act("matmul_backward", dt, [&](auto tag) {
    using S = decltype(tag);
    if (dinp)
      gemm<S, S>(lt, ws, act_mut<S>(dinp), act<S>(w), false, C, act<S>(dout), false, OC, C, N, OC, 0.0f, nullptr,
                 stream);
    // dW in fp32 from 16-bit (or fp32) A/B, accumulated: C = D = dw, beta = 1.
    // (null: a frozen weight, whose gradient nobody needs)
    if (dw) gemm<S, float>(lt, ws, dw, act<S>(inp), false, C, act<S>(dout), true, OC, C, OC, N, 1.0f, nullptr, stream);
    if (dbias) column_sums_add(dbias, act<S>(dout), N, OC, ws, stream);
  });
}

size_t gelu_epilogue_matmuls() { return g_gelu_epilogue_matmuls.load(std::memory_order_relaxed); }

void matmul_gelu_forward(TypedPtr out, TypedPtr pre, ConstTypedPtr inp, ConstTypedPtr w, ConstTypedPtr bias, int N,
                         int C, int OC, Context& ctx) {
  const DType dt = act_dtype("matmul_gelu_forward", out, pre, inp, w, bias);
  if (N == 0 || OC == 0) return;
  bool fused = false;
  if (gelu_epilogue_takes(dt, OC, {out.data, pre.data, bias.data})) {
    const Workspace ws = ctx.workspace(0);
    dispatch_act("matmul_gelu_forward", dt, [&](auto tag) {
      using S = decltype(tag);
      fused = gemm<S, S>(ctx.lt, ws, act_mut<S>(out), act<S>(w), true, C, act<S>(inp), false, C, OC, N, C, 0.0f,
                         act<S>(bias), ctx.stream, GeluAux{Gelu::Forward, act_mut<S>(pre)});
    });
  }
  if (fused) return;
  matmul_forward(pre, inp, w, bias, N, C, OC, ctx);
  gelu_forward(out, pre, size_t(N) * size_t(OC), ctx);
}

void matmul_backward_gelu(TypedPtr dinp, float* dw, float* dbias, ConstTypedPtr dout, ConstTypedPtr inp,
                          ConstTypedPtr w, ConstTypedPtr pre, int N, int C, int OC, Context& ctx) {
  const DType dt = act_dtype("matmul_backward_gelu", dinp, dout, inp, w, pre);
  if (N == 0) return;
  bool fused = false;
  if (dinp && gelu_epilogue_takes(dt, C, {dinp.data, pre.data})) {
    const Workspace ws = ctx.workspace(0);
    dispatch_act("matmul_backward_gelu", dt, [&](auto tag) {
      using S = decltype(tag);
      fused = gemm<S, S>(ctx.lt, ws, act_mut<S>(dinp), act<S>(w), false, C, act<S>(dout), false, OC, C, N, OC, 0.0f,
                         nullptr, ctx.stream, GeluAux{Gelu::Backward, act<S>(pre)});
    });
  }
  if (fused) {
    matmul_backward(TypedPtr(), dw, dbias, dout, inp, w, N, C, OC, ctx);  // dW and dbias as ever
    return;
  }
  matmul_backward(dinp, dw, dbias, dout, inp, w, N, C, OC, ctx);
  if (dinp) gelu_backward(dinp, pre, dinp, size_t(N) * size_t(C), ctx);
}

}  // namespace loom::cuda
