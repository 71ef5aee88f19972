// Fused softmax + cross-entropy (+ its gradient) over vocab-padded logits. All arithmetic in
// acc_t<T> (fp32 for 16-bit logits, widened as they are read); losses, maxes and partials are
// fp32 (Fp32); a 16-bit dlogits element is rounded once when stored.
#include <algorithm>
#include <cmath>
#include <limits>

#include "kernels/cpu/cpu_ops.hpp"

namespace loom::cpu {

template <typename T>
void softmax_crossentropy(acc_t<T>* losses, T* logits, const int32_t* targets, int N, int V, int Vp, acc_t<T> dloss,
                          bool write_grad) {
  using A = acc_t<T>;
#pragma omp parallel for schedule(static)
  for (int i = 0; i < N; ++i) {
    T* row = logits + static_cast<size_t>(i) * Vp;
    // Only the first V columns are real tokens: the padding never enters the max or the sum.
    A mx = -std::numeric_limits<A>::infinity();
    for (int j = 0; j < V; ++j) mx = std::max(mx, A(row[j]));
    A s = 0;
    for (int j = 0; j < V; ++j) s += std::exp(A(row[j]) - mx);
    const A lse = mx + std::log(s);
    const int tgt = targets[i];
    losses[i] = lse - A(row[tgt]);
    if (write_grad) {
      for (int j = 0; j < V; ++j) row[j] = T(dloss * (std::exp(A(row[j]) - lse) - (j == tgt ? A(1) : A(0))));
      for (int j = V; j < Vp; ++j) row[j] = T{};
    }
  }
}

template <typename T>
void crossentropy_max(acc_t<T>* maxes, const T* logits, int N, int Vl, int v_real) {
  using A = acc_t<T>;
#pragma omp parallel for schedule(static)
  for (int i = 0; i < N; ++i) {
    const T* row = logits + static_cast<size_t>(i) * Vl;
    A mx = -std::numeric_limits<A>::infinity();
    for (int j = 0; j < v_real; ++j) mx = std::max(mx, A(row[j]));
    maxes[i] = mx;
  }
}

template <typename T>
void crossentropy_partials(acc_t<T>* partials, const T* logits, const acc_t<T>* maxes, const int32_t* targets, int N,
                           int Vl, int v_real, int vocab_start) {
  using A = acc_t<T>;
#pragma omp parallel for schedule(static)
  for (int i = 0; i < N; ++i) {
    const T* row = logits + static_cast<size_t>(i) * Vl;
    A s = 0;
    for (int j = 0; j < v_real; ++j) s += std::exp(A(row[j]) - maxes[i]);
    const int t = targets[i] - vocab_start;
    partials[i] = s;
    partials[N + i] = (t >= 0 && t < v_real) ? A(row[t]) : A(0);
  }
}

template <typename T>
void crossentropy_finish(acc_t<T>* losses, T* logits, const acc_t<T>* maxes, const acc_t<T>* partials,
                         const int32_t* targets, int N, int Vl, int v_real, int vocab_start, acc_t<T> dloss,
                         bool write_grad) {
  using A = acc_t<T>;
#pragma omp parallel for schedule(static)
  for (int i = 0; i < N; ++i) {
    const A lse = maxes[i] + std::log(partials[i]);
    losses[i] = lse - partials[N + i];
    if (!write_grad) continue;
    T* row = logits + static_cast<size_t>(i) * Vl;
    const int t = targets[i] - vocab_start;
    for (int j = 0; j < v_real; ++j) row[j] = T(dloss * (std::exp(A(row[j]) - lse) - (j == t ? A(1) : A(0))));
    for (int j = v_real; j < Vl; ++j) row[j] = T{};
  }
}

#define LOOM_INSTANTIATE(T)                                                                                         \
  template void crossentropy_max<T>(acc_t<T>*, const T*, int, int, int);                                            \
  template void crossentropy_partials<T>(acc_t<T>*, const T*, const acc_t<T>*, const int32_t*, int, int, int, int); \
  template void crossentropy_finish<T>(acc_t<T>*, T*, const acc_t<T>*, const acc_t<T>*, const int32_t*, int, int,   \
                                       int, int, acc_t<T>, bool);                                                   \
  template void softmax_crossentropy<T>(acc_t<T>*, T*, const int32_t*, int, int, int, acc_t<T>, bool);
LOOM_INSTANTIATE(float)
LOOM_INSTANTIATE(double)
LOOM_INSTANTIATE(bf16)
LOOM_INSTANTIATE(fp16)
#undef LOOM_INSTANTIATE

}  // namespace loom::cpu
