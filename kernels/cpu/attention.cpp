// Causal multi-head self-attention, one (batch, head) pair per task. The reference keeps the
// (T, T) probabilities for backward; the CUDA backend saves only the log-sum-exp instead.
#include <cmath>
#include <limits>
#include <vector>

#include "kernels/cpu/cpu_ops.hpp"
#include "kernels/cpu/eigen_maps.hpp"

namespace loom::cpu {

template <typename T>
void attention_forward(T* out, T* att, const T* qkv, int B, int Tn, int C, int NH) {
  const int hs = C / NH;
  const T scale = T(1) / std::sqrt(T(hs));
  // Inside this parallel region OpenBLAS (OpenMP build) runs each gemm on the calling thread.
#pragma omp parallel for schedule(static)
  for (int bh = 0; bh < B * NH; ++bh) {
    const int b = bh / NH, h = bh % NH;
    const T* base = qkv + static_cast<size_t>(b) * Tn * 3 * C + h * hs;
    ConstStridedMap<T> Q(base, Tn, hs, Eigen::OuterStride<>(3 * C));
    ConstStridedMap<T> K(base + C, Tn, hs, Eigen::OuterStride<>(3 * C));
    ConstStridedMap<T> V(base + 2 * C, Tn, hs, Eigen::OuterStride<>(3 * C));
    MatMap<T> P(att + static_cast<size_t>(bh) * Tn * Tn, Tn, Tn);
    P.noalias() = Q * K.transpose();
    for (int i = 0; i < Tn; ++i) {
      T* row = P.data() + static_cast<size_t>(i) * Tn;
      T mx = -std::numeric_limits<T>::infinity();
      for (int j = 0; j <= i; ++j) mx = std::max(mx, row[j] * scale);
      T s = 0;
      for (int j = 0; j <= i; ++j) {
        row[j] = std::exp(row[j] * scale - mx);
        s += row[j];
      }
      const T inv = T(1) / s;
      for (int j = 0; j <= i; ++j) row[j] *= inv;
      for (int j = i + 1; j < Tn; ++j) row[j] = 0;  // causal mask
    }
    StridedMap<T> O(out + static_cast<size_t>(b) * Tn * C + h * hs, Tn, hs, Eigen::OuterStride<>(C));
    O.noalias() = P * V;
  }
}

template <typename T>
void attention_backward(T* dqkv, const T* dout, const T* qkv, const T* att, int B, int Tn, int C, int NH) {
  const int hs = C / NH;
  const T scale = T(1) / std::sqrt(T(hs));
#pragma omp parallel
  {
    RowMat<T> dP(Tn, Tn);  // per-thread scratch: gradient of the probabilities, then of the scores
#pragma omp for schedule(static)
    for (int bh = 0; bh < B * NH; ++bh) {
      const int b = bh / NH, h = bh % NH;
      const size_t qoff = static_cast<size_t>(b) * Tn * 3 * C + h * hs;
      const Eigen::OuterStride<> s3(3 * C), s1(C);
      ConstStridedMap<T> Q(qkv + qoff, Tn, hs, s3), K(qkv + qoff + C, Tn, hs, s3), V(qkv + qoff + 2 * C, Tn, hs, s3);
      StridedMap<T> dQ(dqkv + qoff, Tn, hs, s3), dK(dqkv + qoff + C, Tn, hs, s3), dV(dqkv + qoff + 2 * C, Tn, hs, s3);
      ConstStridedMap<T> dO(dout + static_cast<size_t>(b) * Tn * C + h * hs, Tn, hs, s1);
      ConstMatMap<T> P(att + static_cast<size_t>(bh) * Tn * Tn, Tn, Tn);

      dV.noalias() = P.transpose() * dO;
      dP.noalias() = dO * V.transpose();
      // Softmax backward: dS = P * (dP - rowsum(P * dP)), then the 1/sqrt(hs) of the scores.
      for (int i = 0; i < Tn; ++i) {
        const T* p = P.data() + static_cast<size_t>(i) * Tn;
        T* d = dP.data() + static_cast<size_t>(i) * Tn;
        T dot = 0;
        for (int j = 0; j <= i; ++j) dot += p[j] * d[j];
        for (int j = 0; j <= i; ++j) d[j] = p[j] * (d[j] - dot) * scale;
        for (int j = i + 1; j < Tn; ++j) d[j] = 0;
      }
      dQ.noalias() = dP * K;
      dK.noalias() = dP.transpose() * Q;
    }
  }
}

template void attention_forward<float>(float*, float*, const float*, int, int, int, int);
template void attention_forward<double>(double*, double*, const double*, int, int, int, int);
template void attention_backward<float>(float*, const float*, const float*, const float*, int, int, int, int);
template void attention_backward<double>(double*, const double*, const double*, const double*, int, int, int, int);

}  // namespace loom::cpu
