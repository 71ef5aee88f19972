// Causal multi-head self-attention, one (batch, head) pair per task. The reference keeps the
// (T, T) probabilities for backward; the CUDA backend saves only the log-sum-exp instead.
// Rows are processed in blocks of kRowBlock queries, and a block only multiplies against the
// keys it can see (0 .. its last row), which skips most of the masked upper triangle.
//
// 16-bit storage: a task widens its head's q, k, v (and in backward dout and the saved
// probabilities) into per-thread fp32 scratch, runs the fp32 head below (scores, softmax and
// every product in fp32), and rounds what it stores once: the output, the probabilities (saved in
// the compute dtype) and dqkv. Backward therefore sees the probabilities rounded to 16 bits.
#include <Eigen/Core>
#include <algorithm>
#include <cmath>

#include "kernels/cpu/convert_simd.hpp"
#include "kernels/cpu/cpu_ops.hpp"
#include "kernels/cpu/eigen_maps.hpp"

namespace loom::cpu {
namespace {

constexpr int kRowBlock = 64;

template <typename A>
using RowArr = Eigen::Map<Eigen::Array<A, 1, Eigen::Dynamic>>;

// One head in acc_t (float or double). q, k, v (Tn, hs) have rows `ld` apart; o (Tn, hs) rows
// `ldo` apart; P (Tn, Tn) the probabilities, written in full (zero above the diagonal).
template <typename A>
void head_forward(A* o, int ldo, A* P_, const A* q_, const A* k_, const A* v_, int ld, int Tn, int hs, A scale) {
  ConstStridedMap<A> q(q_, Tn, hs, Eigen::OuterStride<>(ld)), k(k_, Tn, hs, Eigen::OuterStride<>(ld)),
      v(v_, Tn, hs, Eigen::OuterStride<>(ld));
  MatMap<A> P(P_, Tn, Tn);
  StridedMap<A> O(o, Tn, hs, Eigen::OuterStride<>(ldo));
  for (int r0 = 0; r0 < Tn; r0 += kRowBlock) {
    const int rows = std::min(kRowBlock, Tn - r0), keys = r0 + rows;  // keys this block can see
    auto S = P.block(r0, 0, rows, keys);
    S.noalias() = q.middleRows(r0, rows) * k.topRows(keys).transpose();
    for (int i = 0; i < rows; ++i) {
      const int n = r0 + i + 1;  // row r0+i attends to keys 0 .. r0+i
      RowArr<A> row(P.data() + size_t(r0 + i) * Tn, n);
      row *= scale;
      row = (row - row.maxCoeff()).exp();
      row /= row.sum();
      std::fill(P.data() + size_t(r0 + i) * Tn + n, P.data() + size_t(r0 + i + 1) * Tn, A(0));  // causal mask
    }
    O.middleRows(r0, rows).noalias() = S * v.topRows(keys);
  }
}

// One head's backward in acc_t: dq, dk, dv (rows `ldd` apart) are overwritten; dS is scratch of
// kRowBlock x Tn.
template <typename A>
void head_backward(A* dq_, A* dk_, A* dv_, int ldd, const A* dout, int lddo, const A* P_, const A* q_, const A* k_,
                   const A* v_, int ld, int Tn, int hs, A scale, RowMat<A>& dS) {
  ConstStridedMap<A> q(q_, Tn, hs, Eigen::OuterStride<>(ld)), k(k_, Tn, hs, Eigen::OuterStride<>(ld)),
      v(v_, Tn, hs, Eigen::OuterStride<>(ld));
  StridedMap<A> dq(dq_, Tn, hs, Eigen::OuterStride<>(ldd)), dk(dk_, Tn, hs, Eigen::OuterStride<>(ldd)),
      dv(dv_, Tn, hs, Eigen::OuterStride<>(ldd));
  ConstStridedMap<A> dO(dout, Tn, hs, Eigen::OuterStride<>(lddo));
  ConstMatMap<A> P(P_, Tn, Tn);
  dk.setZero();
  dv.setZero();
  for (int r0 = 0; r0 < Tn; r0 += kRowBlock) {
    const int rows = std::min(kRowBlock, Tn - r0), keys = r0 + rows;
    auto Pb = P.block(r0, 0, rows, keys);
    auto dSb = dS.block(0, 0, rows, keys);
    dv.topRows(keys).noalias() += Pb.transpose() * dO.middleRows(r0, rows);
    dSb.noalias() = dO.middleRows(r0, rows) * v.topRows(keys).transpose();
    // Softmax backward: dS = P * (dP - rowsum(P * dP)), then the 1/sqrt(hs) of the scores.
    // Entries above the diagonal have P = 0, so they come out 0.
    for (int i = 0; i < rows; ++i) {
      const A dot = (Pb.row(i).array() * dSb.row(i).array()).sum();
      dSb.row(i).array() = Pb.row(i).array() * (dSb.row(i).array() - dot) * scale;
    }
    dq.middleRows(r0, rows).noalias() = dSb * k.topRows(keys);
    dk.topRows(keys).noalias() += dSb.transpose() * q.middleRows(r0, rows);
  }
}

// Widens `rows` rows of `cols` elements, `ld` apart, into dst (rows, cols) contiguous; and back.
template <typename T>
void widen_rows(const T* src, int ld, float* dst, int rows, int cols) {
  for (int r = 0; r < rows; ++r) widen(src + size_t(r) * ld, dst + size_t(r) * cols, cols);
}
template <typename T>
void narrow_rows(const float* src, T* dst, int ld, int rows, int cols) {
  for (int r = 0; r < rows; ++r) narrow(src + size_t(r) * cols, dst + size_t(r) * ld, cols);
}

}  // namespace

template <typename T>
void attention_forward(T* out, T* att, const T* qkv, int B, int Tn, int C, int NH) {
  using A = acc_t<T>;
  const int hs = C / NH;
  const A scale = A(1) / std::sqrt(A(hs));
  // Inside this parallel region OpenBLAS (OpenMP build) runs each gemm on the calling thread.
#pragma omp parallel for schedule(static)
  for (int bh = 0; bh < B * NH; ++bh) {
    const int b = bh / NH, h = bh % NH;
    const T* q = qkv + size_t(b) * Tn * 3 * C + h * hs;
    T* o = out + size_t(b) * Tn * C + h * hs;
    T* P = att + size_t(bh) * Tn * Tn;
    if constexpr (!is_16bit<T>) {
      head_forward<A>(o, C, P, q, q + C, q + 2 * C, 3 * C, Tn, hs, scale);
    } else {
      float* in = fp32_scratch(0, size_t(3) * Tn * hs);  // q | k | v, each (Tn, hs)
      float* Pf = fp32_scratch(1, size_t(Tn) * Tn);
      float* of = fp32_scratch(2, size_t(Tn) * hs);
      for (int j = 0; j < 3; ++j) widen_rows(q + j * C, 3 * C, in + size_t(j) * Tn * hs, Tn, hs);
      head_forward<float>(of, hs, Pf, in, in + size_t(Tn) * hs, in + size_t(2) * Tn * hs, hs, Tn, hs, scale);
      narrow(Pf, P, size_t(Tn) * Tn);
      narrow_rows(of, o, C, Tn, hs);
    }
  }
}

template <typename T>
void attention_backward(T* dqkv, const T* dout, const T* qkv, const T* /*out: not needed*/, const T* att, int B, int Tn,
                        int C, int NH) {
  using A = acc_t<T>;
  const int hs = C / NH;
  const A scale = A(1) / std::sqrt(A(hs));
#pragma omp parallel
  {
    RowMat<A> dS(kRowBlock, Tn);  // per-thread scratch: d(probabilities), then d(scores)
#pragma omp for schedule(static)
    for (int bh = 0; bh < B * NH; ++bh) {
      const int b = bh / NH, h = bh % NH;
      const size_t in_off = size_t(b) * Tn * 3 * C + h * hs;
      const T* dO = dout + size_t(b) * Tn * C + h * hs;
      const T* P = att + size_t(bh) * Tn * Tn;
      T* d = dqkv + in_off;
      if constexpr (!is_16bit<T>) {
        const T* q = qkv + in_off;
        head_backward<A>(d, d + C, d + 2 * C, 3 * C, dO, C, P, q, q + C, q + 2 * C, 3 * C, Tn, hs, scale, dS);
      } else {
        const size_t th = size_t(Tn) * hs;
        float* in = fp32_scratch(0, 3 * th);  // q | k | v
        float* dd = fp32_scratch(1, 3 * th);  // dq | dk | dv
        float* dOf = fp32_scratch(2, th);
        float* Pf = fp32_scratch(3, size_t(Tn) * Tn);
        for (int j = 0; j < 3; ++j) widen_rows(qkv + in_off + j * C, 3 * C, in + j * th, Tn, hs);
        widen_rows(dO, C, dOf, Tn, hs);
        widen(P, Pf, size_t(Tn) * Tn);
        head_backward<float>(dd, dd + th, dd + 2 * th, hs, dOf, hs, Pf, in, in + th, in + 2 * th, hs, Tn, hs, scale,
                             dS);
        for (int j = 0; j < 3; ++j) narrow_rows(dd + j * th, d + j * C, 3 * C, Tn, hs);
      }
    }
  }
}

#define LOOM_INSTANTIATE(T)                                                           \
  template void attention_forward<T>(T*, T*, const T*, int, int, int, int);           \
  template void attention_backward<T>(T*, const T*, const T*, const T*, const T*, int, int, int, int);
LOOM_INSTANTIATE(float)
LOOM_INSTANTIATE(double)
LOOM_INSTANTIATE(bf16)
LOOM_INSTANTIATE(fp16)
#undef LOOM_INSTANTIATE

}  // namespace loom::cpu
