// Token + position embedding.
#include <algorithm>

#include "kernels/cpu/cpu_ops.hpp"

namespace loom::cpu {

template <typename T>
void encoder_forward(T* out, const int32_t* tokens, const T* wte, const T* wpe, int B, int Tn, int C) {
#pragma omp parallel for schedule(static)
  for (int bt = 0; bt < B * Tn; ++bt) {
    const T* e = wte + static_cast<size_t>(tokens[bt]) * C;
    const T* p = wpe + static_cast<size_t>(bt % Tn) * C;
    T* o = out + static_cast<size_t>(bt) * C;
    for (int c = 0; c < C; ++c) o[c] = e[c] + p[c];
  }
}

template <typename T>
void encoder_backward(T* dwte, T* dwpe, const T* dout, const int32_t* tokens, int B, int Tn, int C) {
  // Threads own disjoint column blocks, and rows are visited in order, so every sum is formed in
  // the same order whatever the thread count: no races, bitwise-reproducible.
  const int nblocks = (C + kColumnBlock - 1) / kColumnBlock;
#pragma omp parallel for schedule(static)
  for (int blk = 0; blk < nblocks; ++blk) {
    const int c0 = blk * kColumnBlock, c1 = std::min(C, c0 + kColumnBlock);
    for (int bt = 0; bt < B * Tn; ++bt) {
      const T* d = dout + static_cast<size_t>(bt) * C;
      T* e = dwte + static_cast<size_t>(tokens[bt]) * C;
      T* p = dwpe + static_cast<size_t>(bt % Tn) * C;
      for (int c = c0; c < c1; ++c) {
        e[c] += d[c];
        p[c] += d[c];
      }
    }
  }
}

template void encoder_forward<float>(float*, const int32_t*, const float*, const float*, int, int, int);
template void encoder_forward<double>(double*, const int32_t*, const double*, const double*, int, int, int);
template void encoder_backward<float>(float*, float*, const float*, const int32_t*, int, int, int);
template void encoder_backward<double>(double*, double*, const double*, const int32_t*, int, int, int);

}  // namespace loom::cpu
