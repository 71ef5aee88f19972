// Token + position embedding.
#include <algorithm>

#include "kernels/cpu/cpu_ops.hpp"

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
    for (int c = 0; c < C; ++c) o[c] = (mine ? e[c] : T(0)) + (p ? p[c] : T(0));
  }
}

template <typename T>
void encoder_backward(acc_t<T>* dwte, acc_t<T>* dwpe, const T* dout, const int32_t* tokens, int B, int Tn, int C,
                      int vocab_start, int vocab_rows) {
  // Threads own disjoint column blocks, and rows are visited in order, so every sum is formed in
  // the same order whatever the thread count: no races, bitwise-reproducible.
  const int nblocks = (C + kColumnBlock - 1) / kColumnBlock;
#pragma omp parallel for schedule(static)
  for (int blk = 0; blk < nblocks; ++blk) {
    const int c0 = blk * kColumnBlock, c1 = std::min(C, c0 + kColumnBlock);
    for (int bt = 0; bt < B * Tn; ++bt) {
      const T* d = dout + static_cast<size_t>(bt) * C;
      const int row = tokens[bt] - vocab_start;
      if (row >= 0 && row < vocab_rows) {
        T* e = dwte + static_cast<size_t>(row) * C;
        for (int c = c0; c < c1; ++c) e[c] += d[c];
      }
      if (dwpe) {
        T* p = dwpe + static_cast<size_t>(bt % Tn) * C;
        for (int c = c0; c < c1; ++c) p[c] += d[c];
      }
    }
  }
}

template void encoder_forward<float>(float*, const int32_t*, const float*, const float*, int, int, int, int, int);
template void encoder_forward<double>(double*, const int32_t*, const double*, const double*, int, int, int, int, int);
template void encoder_backward<float>(float*, float*, const float*, const int32_t*, int, int, int, int, int);
template void encoder_backward<double>(double*, double*, const double*, const int32_t*, int, int, int, int, int);

}  // namespace loom::cpu
