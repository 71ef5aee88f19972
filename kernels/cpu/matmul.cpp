// Linear layers: out = inp @ W^T + bias, through Eigen -> OpenBLAS gemm.
#include <algorithm>
#include <cstring>

#include "kernels/cpu/cpu_ops.hpp"
#include "kernels/cpu/eigen_maps.hpp"

namespace loom::cpu {

template <typename T>
void matmul_forward(T* out, const T* inp, const T* w, const T* bias, int N, int C, int OC) {
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
}

template <typename T>
void matmul_backward(T* dinp, acc_t<T>* dw, acc_t<T>* dbias, const T* dout, const T* inp, const T* w, int N, int C, int OC) {
  ConstMatMap<T> D(dout, N, OC), X(inp, N, C), W(w, OC, C);
  if (dinp) {
    MatMap<T> DI(dinp, N, C);
    DI.noalias() = D * W;
  }
  MatMap<T> DW(dw, OC, C);
  DW.noalias() += D.transpose() * X;
  if (dbias) {
    const int nblocks = (OC + kColumnBlock - 1) / kColumnBlock;
#pragma omp parallel for schedule(static)
    for (int blk = 0; blk < nblocks; ++blk) {
      const int c0 = blk * kColumnBlock, c1 = std::min(OC, c0 + kColumnBlock);
      T acc[kColumnBlock] = {};
      for (int i = 0; i < N; ++i) {
        const T* d = dout + static_cast<size_t>(i) * OC;
        for (int c = c0; c < c1; ++c) acc[c - c0] += d[c];
      }
      for (int c = c0; c < c1; ++c) dbias[c] += acc[c - c0];
    }
  }
}

template void matmul_forward<float>(float*, const float*, const float*, const float*, int, int, int);
template void matmul_forward<double>(double*, const double*, const double*, const double*, int, int, int);
template void matmul_backward<float>(float*, float*, float*, const float*, const float*, const float*, int, int, int);
template void matmul_backward<double>(double*, double*, double*, const double*, const double*, const double*, int,
                                      int, int);

}  // namespace loom::cpu
