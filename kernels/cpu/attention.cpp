// Causal multi-head self-attention, one (batch, head) pair per task. The reference keeps the
// (T, T) probabilities for backward; the CUDA backend saves only the log-sum-exp instead.
// Rows are processed in blocks of kRowBlock queries, and a block only multiplies against the
// keys it can see (0 .. its last row), which skips most of the masked upper triangle.
//
// bf16 (where oneDNN runs bf16 matmuls and LOOM_CPU_MATMUL is not "reference"): the products
// run through oneDNN on bf16 inputs with fp32 accumulation, batched over all (batch, head) pairs
// one row block at a time and reading q, k, v, dout and the probabilities in place (strided
// views, no copies). Per row block: scores S = q k^T in fp32, the softmax in fp32, the
// probabilities P rounded to bf16 into the saved buffer, and O = P v from those bf16 P (so the
// output carries P's rounding, relative u = 2^-8 per term). Backward: dP = dO v^T in fp32, the
// softmax backward dS = P (dP - rowsum(P dP)) / sqrt(hs) in fp32 from the saved bf16 P, dS
// rounded to bf16 (the matmul input; relative u per term of dq and dk), dq = dS k; then per
// block of keys dk = dS^T q and dv = P^T dO over the rows that can see those keys, so every
// gradient is one fp32 sum rounded once to bf16, never accumulated across calls. Each output
// element is a fixed-order sum (checked: bitwise the same at 1 and 2 threads).
//
// fp16, and bf16 without oneDNN: a task widens its head's q, k, v (and in backward dout and the
// saved probabilities) into per-thread fp32 scratch, runs the fp32 head below (scores, softmax
// and every product in fp32), and rounds what it stores once: the output, the probabilities
// (saved in the compute dtype) and dqkv. Backward therefore sees the probabilities rounded to 16
// bits.
#include <Eigen/Core>
#include <algorithm>
#include <array>
#include <cmath>
#include <cstdlib>
#include <cstring>

#include "kernels/cpu/convert_simd.hpp"
#include "kernels/cpu/cpu_ops.hpp"
#include "kernels/cpu/eigen_maps.hpp"
#include "kernels/cpu/onednn_gemm.hpp"
#include "kernels/cpu/scratch_need.hpp"

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

// ---- bf16 through oneDNN ----

// Same switch as the matmuls (matmul.cpp): LOOM_CPU_MATMUL=reference takes the widened fp32 path.
bool reference_requested() {
  const char* v = std::getenv("LOOM_CPU_MATMUL");
  return v && std::strcmp(v, "reference") == 0;
}

// Rows (and keys) per block of the batched products: a block multiplies against the keys its
// last row sees. 64 measured best at T 256 (32: more, smaller calls; 128: more masked work).
constexpr int kBlock = 64;

// fp32_scratch slots: the calling thread's block of scores (or dP), the whole dS, and each
// thread's widened row of P.
enum { kScoresSlot = 0, kDScoresSlot = 1, kRowSlot = 2 };

// Views of (b, h, row, col) as element strides, for one call's shapes.
struct Heads {
  int B, Tn, NH, hs;
  using Strides = std::array<int64_t, 4>;
  // head h's (Tn, hs) columns of a (B, Tn, W) buffer, and their transpose (hs, Tn)
  Strides cols(int64_t W) const { return {int64_t(Tn) * W, hs, W, 1}; }
  Strides cols_t(int64_t W) const { return {int64_t(Tn) * W, hs, 1, W}; }
  // a (B, NH, Tn, Tn) buffer (probabilities, dS), and its transpose
  Strides tt() const { return {int64_t(NH) * Tn * Tn, int64_t(Tn) * Tn, Tn, 1}; }
  Strides tt_t() const { return {int64_t(NH) * Tn * Tn, int64_t(Tn) * Tn, 1, Tn}; }
  // a dense (B, NH, rows, cols) block
  Strides block(int rows, int cols) const { return {int64_t(NH) * rows * cols, int64_t(rows) * cols, cols, 1}; }
  onednn::BatchedGemmDesc mm(int M, int K, int N, Strides a, Strides b, Strides dst, DType out) const {
    onednn::BatchedGemmDesc d;
    d.in = DType::bf16;
    d.out = out;
    d.batch0 = B;
    d.batch1 = NH;
    d.M = M;
    d.K = K;
    d.N = N;
    d.a_strides = a;
    d.b_strides = b;
    d.dst_strides = dst;
    return d;
  }
};

// The forward's products for the row block starting at r0: S (rows, keys) = q k^T, O = P v.
onednn::BatchedGemmDesc scores_desc(const Heads& g, int C, int r0, int rows) {
  return g.mm(rows, g.hs, r0 + rows, g.cols(3 * C), g.cols_t(3 * C), g.block(rows, r0 + rows), DType::f32);
}
onednn::BatchedGemmDesc pv_desc(const Heads& g, int C, int r0, int rows) {
  return g.mm(rows, r0 + rows, g.hs, g.tt(), g.cols(3 * C), g.cols(C), DType::bf16);
}
// Backward's: per row block dP = dO v^T and dq = dS k; per block of keys c0 .. c0+cols, over the
// rows c0 .. Tn-1 that see them, dk = dS^T q and dv = P^T dO (the same shapes).
onednn::BatchedGemmDesc dp_desc(const Heads& g, int C, int r0, int rows) {
  return g.mm(rows, g.hs, r0 + rows, g.cols(C), g.cols_t(3 * C), g.block(rows, r0 + rows), DType::f32);
}
onednn::BatchedGemmDesc dq_desc(const Heads& g, int C, int r0, int rows) {
  return g.mm(rows, r0 + rows, g.hs, g.tt(), g.cols(3 * C), g.cols(3 * C), DType::bf16);
}
onednn::BatchedGemmDesc dk_desc(const Heads& g, int C, int c0, int cols) {
  return g.mm(cols, g.Tn - c0, g.hs, g.tt_t(), g.cols(3 * C), g.cols(3 * C), DType::bf16);
}
onednn::BatchedGemmDesc dv_desc(const Heads& g, int C, int c0, int cols) {
  return g.mm(cols, g.Tn - c0, g.hs, g.tt_t(), g.cols(C), g.cols(3 * C), DType::bf16);
}

// True when oneDNN runs every product of this shape (checked before anything is written).
bool onednn_usable(const Heads& g, int C) {
  if (reference_requested() || !onednn::built()) return false;
  for (int r0 = 0; r0 < g.Tn; r0 += kBlock) {
    const int n = std::min(kBlock, g.Tn - r0);
    if (!onednn::supported(scores_desc(g, C, r0, n)) || !onednn::supported(pv_desc(g, C, r0, n)) ||
        !onednn::supported(dp_desc(g, C, r0, n)) || !onednn::supported(dq_desc(g, C, r0, n)) ||
        !onednn::supported(dk_desc(g, C, r0, n)) || !onednn::supported(dv_desc(g, C, r0, n)))
      return false;
  }
  return true;
}

// out (B, Tn, C), att (B, NH, Tn, Tn) = P (zero above the diagonal), qkv (B, Tn, 3C).
void forward_onednn(const Heads& g, bf16* out, bf16* att, const bf16* qkv, int C, float scale) {
  const int Tn = g.Tn;
  float* S = fp32_scratch(kScoresSlot, size_t(g.B) * g.NH * kBlock * Tn);  // (B, NH, rows, keys)
  for (int r0 = 0; r0 < Tn; r0 += kBlock) {
    const int rows = std::min(kBlock, Tn - r0), keys = r0 + rows;
    onednn::gemm(scores_desc(g, C, r0, rows), S, qkv + size_t(r0) * 3 * C, qkv + C);
    const int64_t nrows = int64_t(g.B) * g.NH * rows;
#pragma omp parallel for schedule(static)
    for (int64_t x = 0; x < nrows; ++x) {
      const int64_t bh = x / rows, i = x % rows, n = r0 + i + 1;  // row r0+i sees keys 0 .. r0+i
      RowArr<float> row(S + x * keys, n);
      row *= scale;
      row = (row - row.maxCoeff()).exp();
      row /= row.sum();
      bf16* p = att + (bh * Tn + r0 + i) * Tn;
      narrow(row.data(), p, size_t(n));
      std::fill(p + n, p + Tn, bf16{});  // causal mask
    }
    onednn::gemm(pv_desc(g, C, r0, rows), out + size_t(r0) * C, att + size_t(r0) * Tn, qkv + 2 * C);
  }
}

// dqkv (B, Tn, 3C) overwritten; dout (B, Tn, C); att the forward's P.
void backward_onednn(const Heads& g, bf16* dqkv, const bf16* dout, const bf16* qkv, const bf16* att, int C,
                     float scale) {
  const int Tn = g.Tn;
  const size_t tt = size_t(g.B) * g.NH * Tn * Tn;
  float* dP = fp32_scratch(kScoresSlot, size_t(g.B) * g.NH * kBlock * Tn);  // (B, NH, rows, keys)
  // dS (B, NH, Tn, Tn) in bf16; only columns < keys of each row block are written (and read)
  bf16* dS = reinterpret_cast<bf16*>(fp32_scratch(kDScoresSlot, (tt + 1) / 2));
  for (int r0 = 0; r0 < Tn; r0 += kBlock) {
    const int rows = std::min(kBlock, Tn - r0), keys = r0 + rows;
    onednn::gemm(dp_desc(g, C, r0, rows), dP, dout + size_t(r0) * C, qkv + 2 * C);
    const int64_t nrows = int64_t(g.B) * g.NH * rows;
#pragma omp parallel for schedule(static)
    for (int64_t x = 0; x < nrows; ++x) {
      const int64_t bh = x / rows, i = x % rows, n = r0 + i + 1;
      const size_t off = (bh * Tn + r0 + i) * Tn;
      float* pf = fp32_scratch(kRowSlot, size_t(Tn));
      widen(att + off, pf, size_t(n));
      RowArr<float> p(pf, n), d(dP + x * keys, n);
      // Softmax backward, then the 1/sqrt(hs) of the scores; columns n .. keys-1 have P = 0.
      const float dot = (p * d).sum();
      d = p * (d - dot) * scale;
      narrow(d.data(), dS + off, size_t(n));
      std::fill(dS + off + n, dS + off + keys, bf16{});
    }
    onednn::gemm(dq_desc(g, C, r0, rows), dqkv + size_t(r0) * 3 * C, dS + size_t(r0) * Tn, qkv + C);
  }
  for (int c0 = 0; c0 < Tn; c0 += kBlock) {
    const int cols = std::min(kBlock, Tn - c0);
    const size_t diag = size_t(c0) * Tn + c0;
    onednn::gemm(dk_desc(g, C, c0, cols), dqkv + C + size_t(c0) * 3 * C, dS + diag, qkv + size_t(c0) * 3 * C);
    onednn::gemm(dv_desc(g, C, c0, cols), dqkv + 2 * C + size_t(c0) * 3 * C, att + diag, dout + size_t(c0) * C);
  }
}

}  // namespace

template <typename T>
void attention_forward(T* out, T* att, const T* qkv, int B, int Tn, int C, int NH) {
  using A = acc_t<T>;
  const int hs = C / NH;
  const A scale = A(1) / std::sqrt(A(hs));
  if constexpr (std::is_same_v<T, bf16>) {
    const Heads g{B, Tn, NH, hs};
    if (onednn_usable(g, C)) return forward_onednn(g, out, att, qkv, C, scale);
  }
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
  if constexpr (std::is_same_v<T, bf16>) {
    const Heads g{B, Tn, NH, hs};
    if (onednn_usable(g, C)) return backward_onednn(g, dqkv, dout, qkv, att, C, scale);
  }
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

// The slots the paths above take: oneDNN's (bf16) or the per-head widening.
template <typename T>
void attention_scratch(ScratchNeed& need, int B, int Tn, int C, int NH) {
  if constexpr (is_16bit<T>) {
    const int hs = C / NH;
    if constexpr (std::is_same_v<T, bf16>) {
      if (onednn_usable(Heads{B, Tn, NH, hs}, C)) {
        need.on_caller(kScoresSlot, size_t(B) * NH * kBlock * Tn);
        need.on_caller(kDScoresSlot, (size_t(B) * NH * Tn * Tn + 1) / 2);
        need.on_each(kRowSlot, size_t(Tn), long(B) * NH * std::min(kBlock, Tn));  // a row block's rows
        return;
      }
    }
    const size_t th = size_t(Tn) * hs;
    const long heads = long(B) * NH;  // the loops run over (batch, head)
    need.on_each(0, 3 * th, heads);   // forward and backward: q | k | v
    need.on_each(1, size_t(Tn) * Tn, heads);
    need.on_each(1, 3 * th, heads);
    need.on_each(2, th, heads);
    need.on_each(3, size_t(Tn) * Tn, heads);
  } else {
    (void)need, (void)B, (void)Tn, (void)C, (void)NH;
  }
}

#define LOOM_INSTANTIATE(T)                                                           \
  template void attention_forward<T>(T*, T*, const T*, int, int, int, int);           \
  template void attention_backward<T>(T*, const T*, const T*, const T*, const T*, int, int, int, int); \
  template void attention_scratch<T>(ScratchNeed&, int, int, int, int);
LOOM_CPU_FOR_EACH_TYPE(LOOM_INSTANTIATE)
#undef LOOM_INSTANTIATE

}  // namespace loom::cpu
