// Fused softmax + cross-entropy (+ its gradient) over vocab-padded logits.
#include <algorithm>
#include <cmath>
#include <limits>

#include "kernels/cpu/cpu_ops.hpp"

namespace loom::cpu {

template <typename T>
void softmax_crossentropy(T* losses, T* logits, const int32_t* targets, int N, int V, int Vp, T dloss,
                          bool write_grad) {
#pragma omp parallel for schedule(static)
  for (int i = 0; i < N; ++i) {
    T* row = logits + static_cast<size_t>(i) * Vp;
    // Only the first V columns are real tokens: the padding never enters the max or the sum.
    T mx = -std::numeric_limits<T>::infinity();
    for (int j = 0; j < V; ++j) mx = std::max(mx, row[j]);
    T s = 0;
    for (int j = 0; j < V; ++j) s += std::exp(row[j] - mx);
    const T lse = mx + std::log(s);
    const int tgt = targets[i];
    losses[i] = lse - row[tgt];
    if (write_grad) {
      for (int j = 0; j < V; ++j) row[j] = dloss * (std::exp(row[j] - lse) - (j == tgt ? T(1) : T(0)));
      for (int j = V; j < Vp; ++j) row[j] = 0;
    }
  }
}

template void softmax_crossentropy<float>(float*, float*, const int32_t*, int, int, int, float, bool);
template void softmax_crossentropy<double>(double*, double*, const int32_t*, int, int, int, double, bool);

}  // namespace loom::cpu
