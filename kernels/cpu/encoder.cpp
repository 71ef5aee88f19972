// Token + position embedding. 16-bit storage: the sum is formed in fp32 and rounded once; the
// embedding gradients are fp32 (Fp32), accumulated in fp32 from the widened dout.
#include <algorithm>

#include "kernels/cpu/convert_simd.hpp"
#include "kernels/cpu/cpu_ops.hpp"
#include "kernels/cpu/scratch_need.hpp"

namespace loom::cpu {

template <typename T>
void encoder_forward(T* out, const int32_t* tokens, const T* wte, const T* wpe, int B, int Tn, int C,
                     int vocab_start, int vocab_rows) {
#pragma omp parallel for schedule(static)
  for (int bt = 0; bt < B * Tn; ++bt) {
    const int row = tokens[bt] - vocab_start;
    const bool mine = row >= 0 && row < vocab_rows;
    const T* e = wte + static_cast<size_t>(mine ? row : 0) * C;
    const T* p = wpe ? wpe + static_cast<size_t>(bt % Tn) * C : nullptr;
    T* o = out + static_cast<size_t>(bt) * C;
    if constexpr (!is_16bit<T>) {
      for (int c = 0; c < C; ++c) o[c] = (mine ? e[c] : T(0)) + (p ? p[c] : T(0));
    } else {  // widen the two rows, add, round once
      float* s = fp32_scratch(0, C);
      float* q = fp32_scratch(1, C);
      if (mine) widen(e, s, C); else std::fill(s, s + C, 0.f);
      if (p) widen(p, q, C); else std::fill(q, q + C, 0.f);
      for (int c = 0; c < C; ++c) s[c] += q[c];
      narrow(s, o, C);
    }
  }
}

template <typename T>
void encoder_backward(acc_t<T>* dwte, acc_t<T>* dwpe, const T* dout, const int32_t* tokens, int B, int Tn, int C,
                      int vocab_start, int vocab_rows) {
  using A = acc_t<T>;
  // Threads own disjoint column blocks, and rows are visited in order, so every sum is formed in
  // the same order whatever the thread count: no races, bitwise-reproducible.
  const int nblocks = (C + kColumnBlock - 1) / kColumnBlock;
#pragma omp parallel for schedule(static)
  for (int blk = 0; blk < nblocks; ++blk) {
    const int c0 = blk * kColumnBlock, c1 = std::min(C, c0 + kColumnBlock);
    for (int bt = 0; bt < B * Tn; ++bt) {
      const T* d = dout + static_cast<size_t>(bt) * C;
      const int row = tokens[bt] - vocab_start;
      const A* dc;  // this block's slice [c0, c1) of the row, as acc_t
      alignas(64) float buf[kColumnBlock];
      if constexpr (is_16bit<T>) {
        widen(d + c0, buf, c1 - c0);
        dc = buf;
      } else {
        dc = d + c0;
      }
      if (row >= 0 && row < vocab_rows) {
        A* e = dwte + static_cast<size_t>(row) * C;
        for (int c = c0; c < c1; ++c) e[c] += dc[c - c0];
      }
      if (dwpe) {
        A* p = dwpe + static_cast<size_t>(bt % Tn) * C;
        for (int c = c0; c < c1; ++c) p[c] += dc[c - c0];
      }
    }
  }
}

// The forward's two widened rows on every thread (slots 0, 1); the backward asks nothing.
template <typename T>
void encoder_scratch(ScratchNeed& need, int N, int C) {
  if constexpr (is_16bit<T>) {
    need.on_each(0, size_t(C), N);
    need.on_each(1, size_t(C), N);
  } else {
    (void)need, (void)N, (void)C;
  }
}

#define LOOM_INSTANTIATE(T)                                                                                   \
  template void encoder_forward<T>(T*, const int32_t*, const T*, const T*, int, int, int, int, int);          \
  template void encoder_backward<T>(acc_t<T>*, acc_t<T>*, const T*, const int32_t*, int, int, int, int, int); \
  template void encoder_scratch<T>(ScratchNeed&, int, int);
LOOM_CPU_FOR_EACH_TYPE(LOOM_INSTANTIATE)
#undef LOOM_INSTANTIATE

}  // namespace loom::cpu
