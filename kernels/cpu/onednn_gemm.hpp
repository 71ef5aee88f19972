#pragma once
// The CPU backend's fast path for 16-bit matrix products: oneDNN (2.x) matmul primitives, one per
// shape, created once and cached. A build without oneDNN (LOOM_HAVE_DNNL undefined: e.g. a GPU
// build machine without libdnnl-dev) compiles the same interface, and gemm() then always answers
// false, so callers take their fp32 fallback.
//
// Numerics: the products accumulate in fp32 (oneDNN's bf16 kernels, brg:avx512_core_bf16 on a CPU
// with AVX512_BF16, use VDPBF16PS: pairs of bf16 products summed exactly into fp32); the bias is
// added in fp32 and a 16-bit destination is rounded once, to nearest even. The summation order is
// oneDNN's (blocked over K), not the reference's, but fixed for a shape and thread count.
//
// Threading: Debian's oneDNN uses OpenMP (omp_get_max_threads() threads per call); call from
// outside a parallel region.
#include <array>
#include <cstdint>
#include <string>

#include "kernels/dtype.hpp"

namespace loom::cpu::onednn {

// dst (M,N) [+]= op(a) @ op(b) [+ bias (N), broadcast over rows]. a is (M,K) row-major, or with
// a_trans the (K,M) row-major buffer of its transpose; b is (K,N) row-major, or with b_trans the
// (N,K) row-major buffer of its transpose (a linear layer's weight). a, b and bias have dtype
// `in`; dst has dtype `out`; with `accumulate` dst += the product (fp32 destinations).
struct GemmDesc {
  DType in = DType::bf16, out = DType::bf16;
  int M = 0, K = 0, N = 0;
  bool a_trans = false, b_trans = false, bias = false, accumulate = false;
  bool operator<(const GemmDesc& o) const;
};

// A batch of products on strided views, for operands that live inside other tensors (one
// attention head's columns of the (B, T, 3C) qkv buffer, a block of its (T, T) probabilities):
// dst[i][j] (M,N) = a[i][j] (M,K) @ b[i][j] (K,N) for i < batch0, j < batch1. Each operand is
// given by the element strides of its four dimensions (batch0, batch1, row, column), so a
// transposed operand is a swap of its last two strides and nothing is copied. a and b have dtype
// `in`, dst dtype `out` (fp32 accumulation, a 16-bit dst rounded once). With interleaved strides
// oneDNN 2.6 runs its jit gemm ("gemm:jit"), not brgemm; each dst element is one fixed-order sum.
struct BatchedGemmDesc {
  DType in = DType::bf16, out = DType::f32;
  int64_t batch0 = 1, batch1 = 1, M = 0, K = 0, N = 0;
  std::array<int64_t, 4> a_strides{}, b_strides{}, dst_strides{};
  bool operator<(const BatchedGemmDesc& o) const;
};

// True when this build has oneDNN.
bool built();
// Runs the product through a cached primitive; false (nothing written) when oneDNN is not built
// or has no implementation other than its slow reference one for this desc on this CPU.
bool gemm(const GemmDesc& d, void* dst, const void* a, const void* b, const void* bias);
// True when gemm(d, ...) would run (it creates and caches the primitive).
bool supported(const GemmDesc& d);
// oneDNN's name for the implementation it runs for d ("brg:avx512_core_bf16", ...), or "" if none.
std::string impl_name(const GemmDesc& d);
// The same three for batched strided products.
bool gemm(const BatchedGemmDesc& d, void* dst, const void* a, const void* b);
bool supported(const BatchedGemmDesc& d);
std::string impl_name(const BatchedGemmDesc& d);
// True when the CPU runs bf16 dot products natively (AVX512_BF16 or AMX).
bool cpu_has_native_bf16();

}  // namespace loom::cpu::onednn
