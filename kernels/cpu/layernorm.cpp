// LayerNorm over the last dimension, eps = 1e-5 (GPT-2's value). Statistics, sums and the
// parameter gradients are in acc_t<T> (fp32 for the 16-bit types, whose rows are widened into
// per-thread fp32 scratch); a 16-bit output or input gradient is rounded once when stored.
#include <algorithm>
#include <cmath>
#include <vector>

#include "kernels/cpu/convert_simd.hpp"
#include "kernels/cpu/cpu_ops.hpp"
#include "kernels/cpu/scratch_need.hpp"

namespace loom::cpu {

template <typename T>
void layernorm_forward(T* out, acc_t<T>* mean, acc_t<T>* rstd, const T* inp, const T* wt, const T* bt, int N, int C) {
  using A = acc_t<T>;
  const A eps = A(1e-5);
  const A* w = widened(wt, C, 2);  // scratch slots 2, 3: this thread's, read by the whole team
  const A* b = widened(bt, C, 3);
#pragma omp parallel for schedule(static)
  for (int i = 0; i < N; ++i) {
    const A* x = widened(inp + static_cast<size_t>(i) * C, C, 0);
    A m = 0;
    for (int c = 0; c < C; ++c) m += x[c];
    m /= C;
    A var = 0;
    for (int c = 0; c < C; ++c) var += (x[c] - m) * (x[c] - m);
    var /= C;
    const A s = A(1) / std::sqrt(var + eps);
    T* o = out + static_cast<size_t>(i) * C;
    if constexpr (!is_16bit<T>) {
      for (int c = 0; c < C; ++c) o[c] = (x[c] - m) * s * w[c] + b[c];
    } else {
      float* ob = fp32_scratch(1, C);
      for (int c = 0; c < C; ++c) ob[c] = (x[c] - m) * s * w[c] + b[c];
      narrow(ob, o, C);
    }
    mean[i] = m;
    rstd[i] = s;
  }
}

template <typename T>
void layernorm_backward(T* dinp, acc_t<T>* dw, acc_t<T>* db, const T* dout, const T* inp, const T* wt,
                        const acc_t<T>* mean, const acc_t<T>* rstd, int N, int C) {
  using A = acc_t<T>;
  const A* w = widened(wt, C, 3);
  // Input gradient, row-parallel; it accumulates (+=), in acc_t, rounded once per element.
#pragma omp parallel for schedule(static)
  for (int i = 0; i < N; ++i) {
    const A* x = widened(inp + static_cast<size_t>(i) * C, C, 0);
    const A* d = widened(dout + static_cast<size_t>(i) * C, C, 1);
    const A m = mean[i], s = rstd[i];
    A dnorm_mean = 0, dnorm_norm_mean = 0;
    for (int c = 0; c < C; ++c) {
      const A dn = d[c] * w[c];
      dnorm_mean += dn;
      dnorm_norm_mean += dn * (x[c] - m) * s;
    }
    dnorm_mean /= C;
    dnorm_norm_mean /= C;
    T* dio = dinp + static_cast<size_t>(i) * C;
    A* di = nullptr;
    if constexpr (!is_16bit<T>) {
      di = dio;
    } else {
      di = fp32_scratch(2, C);
      widen(dio, di, C);
    }
    for (int c = 0; c < C; ++c) {
      const A norm = (x[c] - m) * s;
      di[c] += (d[c] * w[c] - dnorm_mean - norm * dnorm_norm_mean) * s;
    }
    if constexpr (is_16bit<T>) narrow(di, dio, C);
  }
  if (!dw) return;  // a frozen LayerNorm: only the input gradient
  // Weight and bias gradients, column-parallel so that each column sums its rows in order.
  const int nblocks = (C + kColumnBlock - 1) / kColumnBlock;
#pragma omp parallel for schedule(static)
  for (int blk = 0; blk < nblocks; ++blk) {
    const int c0 = blk * kColumnBlock, c1 = std::min(C, c0 + kColumnBlock);
    A accw[kColumnBlock] = {}, accb[kColumnBlock] = {};
    alignas(64) float xb[kColumnBlock], db16[kColumnBlock];
    for (int i = 0; i < N; ++i) {
      const T* xr = inp + static_cast<size_t>(i) * C + c0;
      const T* dr = dout + static_cast<size_t>(i) * C + c0;
      const A *x, *d;  // this block's slice [c0, c1) of the row, as acc_t
      if constexpr (is_16bit<T>) {
        widen(xr, xb, c1 - c0);
        widen(dr, db16, c1 - c0);
        x = xb, d = db16;
      } else {
        x = xr, d = dr;
      }
      const A m = mean[i], s = rstd[i];
      for (int c = 0; c < c1 - c0; ++c) {
        accw[c] += d[c] * (x[c] - m) * s;
        accb[c] += d[c];
      }
    }
    for (int c = c0; c < c1; ++c) {
      dw[c] += accw[c - c0];
      db[c] += accb[c - c0];
    }
  }
}

// Forward: the weight and bias on the caller (slots 2, 3), a row and its output on every thread
// (0, 1); backward: the weight on the caller (3), a row, its gradient and the input gradient on
// every thread (0, 1, 2).
template <typename T>
void layernorm_scratch(ScratchNeed& need, int N, int C) {
  if constexpr (is_16bit<T>) {
    need.on_caller(2, size_t(C));
    need.on_caller(3, size_t(C));
    for (int s = 0; s < 3; ++s) need.on_each(s, size_t(C), N);
  } else {
    (void)need, (void)N, (void)C;
  }
}

#define LOOM_INSTANTIATE(T)                                                                                         \
  template void layernorm_forward<T>(T*, acc_t<T>*, acc_t<T>*, const T*, const T*, const T*, int, int);             \
  template void layernorm_backward<T>(T*, acc_t<T>*, acc_t<T>*, const T*, const T*, const T*, const acc_t<T>*,      \
                                      const acc_t<T>*, int, int);                                                   \
  template void layernorm_scratch<T>(ScratchNeed&, int, int);
LOOM_CPU_FOR_EACH_TYPE(LOOM_INSTANTIATE)
#undef LOOM_INSTANTIATE

}  // namespace loom::cpu
