// Causal multi-head self-attention, one (batch, head) pair per task. The reference keeps the
// (T, T) probabilities for backward; the CUDA backend saves only the log-sum-exp instead.
// Rows are processed in blocks of kRowBlock queries, and a block only multiplies against the
// keys it can see (0 .. its last row), which skips most of the masked upper triangle.
#include <Eigen/Core>
#include <algorithm>
#include <cmath>

#include "kernels/cpu/cpu_ops.hpp"
#include "kernels/cpu/eigen_maps.hpp"

namespace loom::cpu {
namespace {

constexpr int kRowBlock = 64;

template <typename T>
using RowArr = Eigen::Map<Eigen::Array<T, 1, Eigen::Dynamic>>;

// One head's Q, K, V (T, hs) inside qkv (B, T, 3C), and its output slice in (B, T, C).
template <typename T, typename Ptr>
struct HeadView {
  Eigen::Map<std::conditional_t<std::is_const_v<std::remove_pointer_t<Ptr>>, const RowMat<T>, RowMat<T>>, 0,
             Eigen::OuterStride<>>
      q, k, v;
  HeadView(Ptr qkv, int b, int h, int Tn, int C, int hs)
      : q(qkv + size_t(b) * Tn * 3 * C + h * hs, Tn, hs, Eigen::OuterStride<>(3 * C)),
        k(qkv + size_t(b) * Tn * 3 * C + C + h * hs, Tn, hs, Eigen::OuterStride<>(3 * C)),
        v(qkv + size_t(b) * Tn * 3 * C + 2 * C + h * hs, Tn, hs, Eigen::OuterStride<>(3 * C)) {}
};

}  // namespace

template <typename T>
void attention_forward(T* out, T* att, const T* qkv, int B, int Tn, int C, int NH) {
  const int hs = C / NH;
  const T scale = T(1) / std::sqrt(T(hs));
  // Inside this parallel region OpenBLAS (OpenMP build) runs each gemm on the calling thread.
#pragma omp parallel for schedule(static)
  for (int bh = 0; bh < B * NH; ++bh) {
    const int b = bh / NH, h = bh % NH;
    HeadView<T, const T*> in(qkv, b, h, Tn, C, hs);
    MatMap<T> P(att + size_t(bh) * Tn * Tn, Tn, Tn);
    StridedMap<T> O(out + size_t(b) * Tn * C + h * hs, Tn, hs, Eigen::OuterStride<>(C));
    for (int r0 = 0; r0 < Tn; r0 += kRowBlock) {
      const int rows = std::min(kRowBlock, Tn - r0), keys = r0 + rows;  // keys this block can see
      auto S = P.block(r0, 0, rows, keys);
      S.noalias() = in.q.middleRows(r0, rows) * in.k.topRows(keys).transpose();
      for (int i = 0; i < rows; ++i) {
        const int n = r0 + i + 1;  // row r0+i attends to keys 0 .. r0+i
        RowArr<T> row(P.data() + size_t(r0 + i) * Tn, n);
        row *= scale;
        row = (row - row.maxCoeff()).exp();
        row /= row.sum();
        std::fill(P.data() + size_t(r0 + i) * Tn + n, P.data() + size_t(r0 + i + 1) * Tn, T(0));  // causal mask
      }
      O.middleRows(r0, rows).noalias() = S * in.v.topRows(keys);
    }
  }
}

template <typename T>
void attention_backward(T* dqkv, const T* dout, const T* qkv, const T* /*out: not needed*/, const T* att, int B, int Tn,
                        int C, int NH) {
  const int hs = C / NH;
  const T scale = T(1) / std::sqrt(T(hs));
#pragma omp parallel
  {
    RowMat<T> dS(kRowBlock, Tn);  // per-thread scratch: d(probabilities), then d(scores)
#pragma omp for schedule(static)
    for (int bh = 0; bh < B * NH; ++bh) {
      const int b = bh / NH, h = bh % NH;
      HeadView<T, const T*> in(qkv, b, h, Tn, C, hs);
      HeadView<T, T*> d(dqkv, b, h, Tn, C, hs);
      ConstStridedMap<T> dO(dout + size_t(b) * Tn * C + h * hs, Tn, hs, Eigen::OuterStride<>(C));
      ConstMatMap<T> P(att + size_t(bh) * Tn * Tn, Tn, Tn);
      d.k.setZero();
      d.v.setZero();
      for (int r0 = 0; r0 < Tn; r0 += kRowBlock) {
        const int rows = std::min(kRowBlock, Tn - r0), keys = r0 + rows;
        auto Pb = P.block(r0, 0, rows, keys);
        auto dSb = dS.block(0, 0, rows, keys);
        d.v.topRows(keys).noalias() += Pb.transpose() * dO.middleRows(r0, rows);
        dSb.noalias() = dO.middleRows(r0, rows) * in.v.topRows(keys).transpose();
        // Softmax backward: dS = P * (dP - rowsum(P * dP)), then the 1/sqrt(hs) of the scores.
        // Entries above the diagonal have P = 0, so they come out 0.
        for (int i = 0; i < rows; ++i) {
          const T dot = (Pb.row(i).array() * dSb.row(i).array()).sum();
          dSb.row(i).array() = Pb.row(i).array() * (dSb.row(i).array() - dot) * scale;
        }
        d.q.middleRows(r0, rows).noalias() = dSb * in.k.topRows(keys);
        d.k.topRows(keys).noalias() += dSb.transpose() * in.q.middleRows(r0, rows);
      }
    }
  }
}

template void attention_forward<float>(float*, float*, const float*, int, int, int, int);
template void attention_forward<double>(double*, double*, const double*, int, int, int, int);
template void attention_backward<float>(float*, const float*, const float*, const float*, const float*, int, int, int,
                                        int);
template void attention_backward<double>(double*, const double*, const double*, const double*, const double*, int,
                                         int, int, int);

}  // namespace loom::cpu
