// Linear layers: out = inp @ W^T + bias.
//   float, double  Eigen -> OpenBLAS gemm (the reference).
//   bf16, fp16     oneDNN matmul primitives (onednn_gemm.hpp): 16-bit inputs, fp32
//                  accumulation, the bias added in fp32, a 16-bit output rounded once; dW is an
//                  fp32 destination accumulated with a sum post-op. Where oneDNN cannot run the
//                  dtype (no oneDNN in the build; fp16 on a CPU without AVX512_FP16: oneDNN 2.6 has
//                  no f16 matmul for it) or LOOM_CPU_MATMUL=reference is set, the inputs are
//                  widened to fp32 scratch and the fp32 op runs on them, its results rounded once:
//                  correct, and slower than fp32 itself (the conversions come on top).
//   LOOM_CPU_MATMUL=onednn also runs the fp32 matmuls through oneDNN (opt-in: ~1.4-2x OpenBLAS
//                  at GPT-2 small-model shapes on Zen 5, but its sums are in another order than
//                  the reference's, so fp32 results are no longer bit-identical to the default).
// dbias is summed in acc_t over column blocks, rows in order: deterministic in every path.
#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <type_traits>

#include "kernels/backend.hpp"
#include "kernels/cpu/convert_simd.hpp"
#include "kernels/cpu/cpu_ops.hpp"
#include "kernels/cpu/eigen_maps.hpp"
#include "kernels/cpu/onednn_gemm.hpp"
#include "kernels/cpu/scratch_need.hpp"

namespace loom::cpu {
namespace {

// LOOM_CPU_MATMUL=reference: the 16-bit matmuls take the widen-to-fp32 path (tests compare the
// oneDNN path against it). Read at every call, so a test can switch it with setenv.
bool matmul_mode_is(const char* mode) {
  const char* v = std::getenv("LOOM_CPU_MATMUL");
  return v && std::strcmp(v, mode) == 0;
}
bool reference_requested() { return matmul_mode_is("reference"); }
bool onednn_fp32_requested() { return matmul_mode_is("onednn"); }

// dbias (OC) += column sums of dout (N, OC), in acc_t; threads own column blocks.
template <typename T>
void bias_backward(acc_t<T>* dbias, const T* dout, int N, int OC) {
  using A = acc_t<T>;
  const int nblocks = (OC + kColumnBlock - 1) / kColumnBlock;
#pragma omp parallel for schedule(static)
  for (int blk = 0; blk < nblocks; ++blk) {
    const int c0 = blk * kColumnBlock, c1 = std::min(OC, c0 + kColumnBlock);
    A acc[kColumnBlock] = {};
    for (int i = 0; i < N; ++i) {
      const T* d = dout + static_cast<size_t>(i) * OC;
      for (int c = c0; c < c1; ++c) acc[c - c0] += A(d[c]);
    }
    for (int c = c0; c < c1; ++c) dbias[c] += acc[c - c0];
  }
}

// Output rows of dW per gemm in the float path (matmul_backward). A multiple of 1536: with one
// thread the blocks give bitwise the whole product's result (OpenBLAS 0.3.21, Zen 3, checked at
// widths up to 50304; 4096 and 8192 did not); with more, OpenBLAS splits each block's columns
// among the threads rather than the whole width's, which moves the last bits, as the thread
// count itself does.
constexpr int kDwRows = 6144;

// fp32 scratch slots of the widening path (this thread's; the ops below run outside any
// parallel region).
enum Slot { kInp = 4, kW, kOut, kBias };

template <typename T>
float* widened_copy(int slot, const T* x, size_t n) {
  float* f = fp32_scratch(slot, n);
  widen_parallel(x, f, n);
  return f;
}

// The 16-bit paths' oneDNN products (matmul_scratch asks where oneDNN cannot run them):
// out = inp @ W^T (+ bias); dinp (N,C) = dout (N,OC) @ W (OC,C); dW (OC,C) += dout^T @ inp (fp32).
template <typename T>
onednn::GemmDesc forward_desc(int N, int C, int OC, bool bias) {
  return {dtype_of<T>, dtype_of<T>, N, C, OC, false, true, bias, false};
}
template <typename T>
onednn::GemmDesc dinp_desc(int N, int C, int OC) {
  return {dtype_of<T>, dtype_of<T>, N, OC, C, false, false, false, false};
}
template <typename T>
onednn::GemmDesc dw_desc(int N, int C, int OC) {
  return {dtype_of<T>, DType::f32, OC, N, C, true, false, false, true};
}

}  // namespace

template <typename T>
void matmul_forward(T* out, const T* inp, const T* w, const T* bias, int N, int C, int OC) {
  if constexpr (std::is_same_v<T, float>) {
    if (onednn_fp32_requested()) {
      onednn::GemmDesc d{DType::f32, DType::f32, N, C, OC, false, true, bias != nullptr, false};
      if (onednn::gemm(d, out, inp, w, bias)) return;
    }
  }
  if constexpr (!is_16bit<T>) {
    MatMap<T> O(out, N, OC);
    ConstMatMap<T> X(inp, N, C), W(w, OC, C);
    if (bias) {
      // Seed every row with the bias, then accumulate the product (gemm with beta = 1).
#pragma omp parallel for schedule(static)
      for (int i = 0; i < N; ++i) std::memcpy(out + static_cast<size_t>(i) * OC, bias, sizeof(T) * OC);
      O.noalias() += X * W.transpose();
    } else {
      O.noalias() = X * W.transpose();
    }
  } else {
    if (!reference_requested() && onednn::gemm(forward_desc<T>(N, C, OC, bias != nullptr), out, inp, w, bias)) return;
    float* of = fp32_scratch(kOut, size_t(N) * OC);
    matmul_forward<float>(of, widened_copy(kInp, inp, size_t(N) * C), widened_copy(kW, w, size_t(OC) * C),
                          bias ? widened_copy(kBias, bias, OC) : nullptr, N, C, OC);
    narrow_parallel(of, out, size_t(N) * OC);
  }
}

template <typename T>
void matmul_backward(T* dinp, acc_t<T>* dw, acc_t<T>* dbias, const T* dout, const T* inp, const T* w, int N, int C,
                     int OC) {
  if constexpr (std::is_same_v<T, float>) {
    onednn::GemmDesc di{DType::f32, DType::f32, N, OC, C, false, false, false, false};
    onednn::GemmDesc dwd{DType::f32, DType::f32, OC, N, C, true, false, false, true};
    if (onednn_fp32_requested() && onednn::supported(dwd) && onednn::supported(di)) {
      if (dw) onednn::gemm(dwd, dw, dout, inp, nullptr);
      if (dinp) onednn::gemm(di, dinp, dout, w, nullptr);
      if (dbias) bias_backward(dbias, dout, N, OC);
      return;
    }
  }
  if constexpr (!is_16bit<T>) {
    ConstMatMap<T> D(dout, N, OC), X(inp, N, C), W(w, OC, C);
    if (dinp) {
      MatMap<T> DI(dinp, N, C);
      DI.noalias() = D * W;
    }
    if (dw) {  // null: a frozen weight
      // In blocks of kDwRows output rows: OpenBLAS packs the product's whole width of dout
      // (K x OC) into its buffer, whose pages stay resident, so the LM head's dW at GPT-2's
      // vocabulary kept ~50 MB more per process for the rest of the run (measured: 48.5 MiB at
      // 50304 x 384 x 512 rows).
      MatMap<T> DW(dw, OC, C);
      for (int r0 = 0; r0 < OC; r0 += kDwRows) {
        const int n = std::min(kDwRows, OC - r0);
        DW.middleRows(r0, n).noalias() += D.middleCols(r0, n).transpose() * X;
      }
    }
    if (dbias) bias_backward(dbias, dout, N, OC);
  } else {
    if (!reference_requested()) {
      // dinp (N,C) = dout (N,OC) @ W (OC,C); dW (OC,C) += dout^T @ inp (fp32, accumulated).
      const onednn::GemmDesc di = dinp_desc<T>(N, C, OC), dwd = dw_desc<T>(N, C, OC);
      if (onednn::supported(dwd) && (!dinp || onednn::supported(di))) {
        if (dw) onednn::gemm(dwd, dw, dout, inp, nullptr);
        if (dinp) onednn::gemm(di, dinp, dout, w, nullptr);
        if (dbias) bias_backward(dbias, dout, N, OC);
        return;
      }
    }
    float* df = widened_copy(kOut, dout, size_t(N) * OC);
    float* dif = dinp ? fp32_scratch(kBias, size_t(N) * C) : nullptr;
    matmul_backward<float>(dif, dw, dbias, df, widened_copy(kInp, inp, size_t(N) * C),
                           widened_copy(kW, w, size_t(OC) * C), N, C, OC);
    if (dinp) narrow_parallel(dif, dinp, size_t(N) * C);
  }
}

// The widening path's slots, where matmul_forward and matmul_backward above take it.
template <typename T>
void matmul_scratch(ScratchNeed& need, int N, int C, int OC, bool bias, bool dinp) {
  if constexpr (is_16bit<T>) {
    if (reference_requested() || !onednn::supported(forward_desc<T>(N, C, OC, bias))) {
      need.on_caller(kOut, size_t(N) * OC);
      need.on_caller(kInp, size_t(N) * C);
      need.on_caller(kW, size_t(OC) * C);
      if (bias) need.on_caller(kBias, size_t(OC));
    }
    if (reference_requested() || !onednn::supported(dw_desc<T>(N, C, OC)) ||
        (dinp && !onednn::supported(dinp_desc<T>(N, C, OC)))) {
      need.on_caller(kOut, size_t(N) * OC);
      if (dinp) need.on_caller(kBias, size_t(N) * C);
      need.on_caller(kInp, size_t(N) * C);
      need.on_caller(kW, size_t(OC) * C);
    }
  } else {
    (void)need, (void)N, (void)C, (void)OC, (void)bias, (void)dinp;
  }
}

}  // namespace loom::cpu

namespace loom {
bool cpu_matmul_widens(DType compute) {
  if (compute != DType::bf16 && compute != DType::f16) return false;
  cpu::onednn::GemmDesc d;
  d.in = d.out = compute;
  d.M = d.K = d.N = 64;
  d.b_trans = true;
  return cpu::reference_requested() || !cpu::onednn::supported(d);
}
}  // namespace loom

namespace loom::cpu {

#define LOOM_INSTANTIATE(T)                                                                          \
  template void matmul_forward<T>(T*, const T*, const T*, const T*, int, int, int);                  \
  template void matmul_backward<T>(T*, acc_t<T>*, acc_t<T>*, const T*, const T*, const T*, int, int, int); \
  template void matmul_scratch<T>(ScratchNeed&, int, int, int, bool, bool);
LOOM_CPU_FOR_EACH_TYPE(LOOM_INSTANTIATE)
#undef LOOM_INSTANTIATE

}  // namespace loom::cpu
