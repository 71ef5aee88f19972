// Fused softmax + cross-entropy (+ its gradient) over vocab-padded logits.
#include <algorithm>
#include <cmath>
#include <limits>

#include "kernels/cpu/cpu_ops.hpp"

namespace loom::cpu {

template <typename T>
void softmax_crossentropy(acc_t<T>* losses, T* logits, const int32_t* targets, int N, int V, int Vp, acc_t<T> dloss,
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

template <typename T>
void crossentropy_max(acc_t<T>* maxes, const T* logits, int N, int Vl, int v_real) {
#pragma omp parallel for schedule(static)
  for (int i = 0; i < N; ++i) {
    const T* row = logits + static_cast<size_t>(i) * Vl;
    T mx = -std::numeric_limits<T>::infinity();
    for (int j = 0; j < v_real; ++j) mx = std::max(mx, row[j]);
    maxes[i] = mx;
  }
}

template <typename T>
void crossentropy_partials(acc_t<T>* partials, const T* logits, const acc_t<T>* maxes, const int32_t* targets, int N, int Vl,
                           int v_real, int vocab_start) {
#pragma omp parallel for schedule(static)
  for (int i = 0; i < N; ++i) {
    const T* row = logits + static_cast<size_t>(i) * Vl;
    T s = 0;
    for (int j = 0; j < v_real; ++j) s += std::exp(row[j] - maxes[i]);
    const int t = targets[i] - vocab_start;
    partials[i] = s;
    partials[N + i] = (t >= 0 && t < v_real) ? row[t] : T(0);
  }
}

template <typename T>
void crossentropy_finish(acc_t<T>* losses, T* logits, const acc_t<T>* maxes, const acc_t<T>* partials, const int32_t* targets, int N,
                         int Vl, int v_real, int vocab_start, acc_t<T> dloss, bool write_grad) {
#pragma omp parallel for schedule(static)
  for (int i = 0; i < N; ++i) {
    const T lse = maxes[i] + std::log(partials[i]);
    losses[i] = lse - partials[N + i];
    if (!write_grad) continue;
    T* row = logits + static_cast<size_t>(i) * Vl;
    const int t = targets[i] - vocab_start;
    for (int j = 0; j < v_real; ++j) row[j] = dloss * (std::exp(row[j] - lse) - (j == t ? T(1) : T(0)));
    for (int j = v_real; j < Vl; ++j) row[j] = 0;
  }
}

template void crossentropy_max<float>(float*, const float*, int, int, int);
template void crossentropy_max<double>(double*, const double*, int, int, int);
template void crossentropy_partials<float>(float*, const float*, const float*, const int32_t*, int, int, int, int);
template void crossentropy_partials<double>(double*, const double*, const double*, const int32_t*, int, int, int,
                                            int);
template void crossentropy_finish<float>(float*, float*, const float*, const float*, const int32_t*, int, int, int,
                                         int, float, bool);
template void crossentropy_finish<double>(double*, double*, const double*, const double*, const int32_t*, int, int,
                                          int, int, double, bool);
template void softmax_crossentropy<float>(float*, float*, const int32_t*, int, int, int, float, bool);
template void softmax_crossentropy<double>(double*, double*, const int32_t*, int, int, int, double, bool);

}  // namespace loom::cpu
