// LayerNorm over the last dimension, eps = 1e-5 (GPT-2's value).
#include <algorithm>
#include <cmath>
#include <vector>

#include "kernels/cpu/cpu_ops.hpp"

namespace loom::cpu {

template <typename T>
void layernorm_forward(T* out, acc_t<T>* mean, acc_t<T>* rstd, const T* inp, const T* w, const T* b, int N, int C) {
  const T eps = T(1e-5);
#pragma omp parallel for schedule(static)
  for (int i = 0; i < N; ++i) {
    const T* x = inp + static_cast<size_t>(i) * C;
    T m = 0;
    for (int c = 0; c < C; ++c) m += x[c];
    m /= C;
    T var = 0;
    for (int c = 0; c < C; ++c) var += (x[c] - m) * (x[c] - m);
    var /= C;
    const T s = T(1) / std::sqrt(var + eps);
    T* o = out + static_cast<size_t>(i) * C;
    for (int c = 0; c < C; ++c) o[c] = (x[c] - m) * s * w[c] + b[c];
    mean[i] = m;
    rstd[i] = s;
  }
}

template <typename T>
void layernorm_backward(T* dinp, acc_t<T>* dw, acc_t<T>* db, const T* dout, const T* inp, const T* w, const acc_t<T>* mean,
                        const acc_t<T>* rstd, int N, int C) {
  // Input gradient, row-parallel.
#pragma omp parallel for schedule(static)
  for (int i = 0; i < N; ++i) {
    const T* x = inp + static_cast<size_t>(i) * C;
    const T* d = dout + static_cast<size_t>(i) * C;
    const T m = mean[i], s = rstd[i];
    T dnorm_mean = 0, dnorm_norm_mean = 0;
    for (int c = 0; c < C; ++c) {
      const T dn = d[c] * w[c];
      dnorm_mean += dn;
      dnorm_norm_mean += dn * (x[c] - m) * s;
    }
    dnorm_mean /= C;
    dnorm_norm_mean /= C;
    T* di = dinp + static_cast<size_t>(i) * C;
    for (int c = 0; c < C; ++c) {
      const T norm = (x[c] - m) * s;
      di[c] += (d[c] * w[c] - dnorm_mean - norm * dnorm_norm_mean) * s;
    }
  }
  // Weight and bias gradients, column-parallel so that each column sums its rows in order.
  const int nblocks = (C + kColumnBlock - 1) / kColumnBlock;
#pragma omp parallel for schedule(static)
  for (int blk = 0; blk < nblocks; ++blk) {
    const int c0 = blk * kColumnBlock, c1 = std::min(C, c0 + kColumnBlock);
    T accw[kColumnBlock] = {}, accb[kColumnBlock] = {};
    for (int i = 0; i < N; ++i) {
      const T* x = inp + static_cast<size_t>(i) * C;
      const T* d = dout + static_cast<size_t>(i) * C;
      const T m = mean[i], s = rstd[i];
      for (int c = c0; c < c1; ++c) {
        accw[c - c0] += d[c] * (x[c] - m) * s;
        accb[c - c0] += d[c];
      }
    }
    for (int c = c0; c < c1; ++c) {
      dw[c] += accw[c - c0];
      db[c] += accb[c - c0];
    }
  }
}

template void layernorm_forward<float>(float*, float*, float*, const float*, const float*, const float*, int, int);
template void layernorm_forward<double>(double*, double*, double*, const double*, const double*, const double*, int,
                                        int);
template void layernorm_backward<float>(float*, float*, float*, const float*, const float*, const float*,
                                        const float*, const float*, int, int);
template void layernorm_backward<double>(double*, double*, double*, const double*, const double*, const double*,
                                         const double*, const double*, int, int);

}  // namespace loom::cpu
