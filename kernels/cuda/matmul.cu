// Linear layers through cuBLASLt, fp32 in, fp32 compute (CUBLAS_COMPUTE_32F: no TF32, so that
// results follow the fp32 CPU reference within fp32 rounding), bias fused as an epilogue in the
// forward pass. Row-major tensors are read as their column-major transposes:
//   out (N,OC) = inp (N,C) @ W^T        is  out^T (OC,N) = W^T... i.e. D = op_T(W) * inp^T
//   dinp (N,C) = dout @ W               is  dinp^T (C,N) = W(C,OC col-major) * dout^T
//   dW (OC,C) += dout^T @ inp           is  dW^T (C,OC) += inp^T (C,N) * dout (N,OC)
// The bias gradient is a deterministic column sum (reduce.cu style, in column_sums_add).
#include <algorithm>
#include <cstdint>

#include "kernels/cuda/cuda_check.cuh"
#include "kernels/cuda/ops.cuh"

namespace loom::cuda {
namespace {

// The largest power of two (<= 256) the address is aligned to. Weights and gradients are
// views into one flat buffer, so they are often only 4-byte aligned; cuBLASLt assumes 256 unless
// told, and could pick a kernel that needs more.
uint32_t alignment_of(const void* p) {
  uint32_t a = 256;
  while (a > 4 && reinterpret_cast<uintptr_t>(p) % a) a /= 2;
  return a;
}

// The heuristic always gets the same workspace limit, so that the algorithm chosen for a shape
// (and with it the bits of the result) does not change when the backend's scratch grows.
constexpr size_t kGemmWorkspace = size_t(32) << 20;

__global__ void broadcast_bias_kernel(float* D, const float* bias, int m, int n) {
  const size_t i = size_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < size_t(m) * n) D[i] = bias[i % size_t(m)];
}

// D (m x n, column-major, ld m) = alpha * op(A) * op(B) + beta * D [+ bias (m) broadcast over columns].
void gemm(cublasLtHandle_t lt, Workspace ws, float* D, const float* A, bool transA, int lda, const float* B,
          bool transB, int ldb, int m, int n, int k, float beta, const float* bias, cudaStream_t stream) {
  if (bias && reinterpret_cast<uintptr_t>(bias) % 16 != 0) {
    // The bias epilogue needs a 16-byte aligned vector: otherwise write the bias into D first
    // and accumulate the product onto it.
    broadcast_bias_kernel<<<blocks_for(size_t(m) * n, 256), 256, 0, stream>>>(D, bias, m, n);
    LOOM_CUDA_LAUNCHED();
    bias = nullptr;
    beta = 1.0f;
  }
  cublasLtMatmulDesc_t op = nullptr;
  cublasLtMatrixLayout_t la = nullptr, lb = nullptr, ld = nullptr;
  cublasLtMatmulPreference_t pref = nullptr;
  LOOM_CUDA_CHECK(cublasLtMatmulDescCreate(&op, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  const cublasOperation_t ta = transA ? CUBLAS_OP_T : CUBLAS_OP_N, tb = transB ? CUBLAS_OP_T : CUBLAS_OP_N;
  LOOM_CUDA_CHECK(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta));
  LOOM_CUDA_CHECK(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof tb));
  if (bias) {
    const cublasLtEpilogue_t epi = CUBLASLT_EPILOGUE_BIAS;
    LOOM_CUDA_CHECK(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof epi));
    LOOM_CUDA_CHECK(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof bias));
  }
  // Stored shapes (rows x cols, column-major) of A and B before op().
  LOOM_CUDA_CHECK(cublasLtMatrixLayoutCreate(&la, CUDA_R_32F, transA ? k : m, transA ? m : k, lda));
  LOOM_CUDA_CHECK(cublasLtMatrixLayoutCreate(&lb, CUDA_R_32F, transB ? n : k, transB ? k : n, ldb));
  LOOM_CUDA_CHECK(cublasLtMatrixLayoutCreate(&ld, CUDA_R_32F, m, n, m));
  LOOM_CUDA_CHECK(cublasLtMatmulPreferenceCreate(&pref));
  const size_t limit = std::min(ws.bytes, kGemmWorkspace);
  LOOM_CUDA_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &limit,
                                                       sizeof limit));
  const uint32_t align_a = alignment_of(A), align_b = alignment_of(B), align_d = alignment_of(D);
  LOOM_CUDA_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &align_a,
                                                       sizeof align_a));
  LOOM_CUDA_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &align_b,
                                                       sizeof align_b));
  LOOM_CUDA_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &align_d,
                                                       sizeof align_d));
  LOOM_CUDA_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &align_d,
                                                       sizeof align_d));
  cublasLtMatmulHeuristicResult_t heur{};
  int found = 0;
  LOOM_CUDA_CHECK(cublasLtMatmulAlgoGetHeuristic(lt, op, la, lb, ld, ld, pref, 1, &heur, &found));
  if (found == 0) throw std::runtime_error("cuBLASLt: no algorithm for this fp32 matmul");
  const float alpha = 1.0f;
  LOOM_CUDA_CHECK(cublasLtMatmul(lt, op, &alpha, A, la, B, lb, &beta, D, ld, D, ld, &heur.algo, ws.ptr, limit,
                                 stream));
  cublasLtMatmulPreferenceDestroy(pref);
  cublasLtMatrixLayoutDestroy(ld);
  cublasLtMatrixLayoutDestroy(lb);
  cublasLtMatrixLayoutDestroy(la);
  cublasLtMatmulDescDestroy(op);
}

constexpr int kColGroups = 64;

__global__ void column_partial_kernel(float* part, const float* x, int rows, int cols) {
  const int c = blockIdx.x * blockDim.x + threadIdx.x, g = blockIdx.y;
  if (c >= cols) return;
  float s = 0;
  for (int r = g; r < rows; r += kColGroups) s += x[size_t(r) * cols + c];
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
void column_sums_add(float* out, const float* x, int rows, int cols, Workspace ws, cudaStream_t stream) {
  if (rows == 0 || cols == 0) return;
  if (ws.bytes < size_t(kColGroups) * cols * sizeof(float)) throw std::runtime_error("column_sums_add: workspace too small");
  float* part = static_cast<float*>(ws.ptr);
  column_partial_kernel<<<dim3(blocks_for(size_t(cols), 128), kColGroups), 128, 0, stream>>>(part, x, rows, cols);
  LOOM_CUDA_LAUNCHED();
  column_finish_kernel<<<blocks_for(size_t(cols), 128), 128, 0, stream>>>(out, part, cols);
  LOOM_CUDA_LAUNCHED();
}

}  // namespace

void matmul_forward(float* out, const float* inp, const float* w, const float* bias, int N, int C, int OC,
                    Context& ctx) {
  const Workspace ws = ctx.workspace(0);
  const cudaStream_t stream = ctx.stream;
  if (N == 0 || OC == 0) return;
  gemm(ctx.lt, ws, out, w, /*transA=*/true, C, inp, /*transB=*/false, C, OC, N, C, 0.0f, bias, stream);
}

void matmul_backward(float* dinp, float* dw, float* dbias, const float* dout, const float* inp, const float* w, int N,
                     int C, int OC, Context& ctx) {
  const Workspace ws = ctx.workspace(size_t(kColGroups) * OC * sizeof(float));  // column_sums_add
  const cudaStream_t stream = ctx.stream;
  const cublasLtHandle_t lt = ctx.lt;
  if (N == 0) return;
  if (dinp) gemm(lt, ws, dinp, w, false, C, dout, false, OC, C, N, OC, 0.0f, nullptr, stream);
  gemm(lt, ws, dw, inp, false, C, dout, true, OC, C, OC, N, 1.0f, nullptr, stream);
  if (dbias) column_sums_add(dbias, dout, N, OC, ws, stream);
}

}  // namespace loom::cuda
