// Fused softmax + cross-entropy (+ its gradient) over vocab-padded logits. All arithmetic in
// acc_t<T>: a row of 16-bit logits is widened once into per-thread fp32 scratch (vector
// conversions), the fp32 code below runs on it, and with write_grad the dlogits row is rounded
// once, to nearest even, when stored. Losses, maxes and partials are fp32 (Fp32).
#include <algorithm>
#include <cmath>
#include <limits>

#include "kernels/cpu/convert_simd.hpp"
#include "kernels/cpu/cpu_ops.hpp"
#include "kernels/cpu/scratch_need.hpp"

namespace loom::cpu {
namespace {

// The row as acc_t to write dlogits into: the row itself for float and double, else scratch
// (holding the widened logits) that store_row() rounds back.
template <typename T>
acc_t<T>* row_acc(T* row, int n) {
  if constexpr (is_16bit<T>) {
    float* f = fp32_scratch(0, n);
    widen(row, f, n);
    return f;
  } else {
    (void)n;
    return row;
  }
}
template <typename T>
void store_row(const acc_t<T>* r, T* row, int n) {
  if constexpr (is_16bit<T>) narrow(r, row, n);
}

}  // namespace

template <typename T>
void softmax_crossentropy(acc_t<T>* losses, T* logits, const int32_t* targets, int N, int V, int Vp, acc_t<T> dloss,
                          bool write_grad) {
  using A = acc_t<T>;
#pragma omp parallel for schedule(static)
  for (int i = 0; i < N; ++i) {
    A* row = row_acc(logits + static_cast<size_t>(i) * Vp, Vp);
    // Only the first V columns are real tokens: the padding never enters the max or the sum.
    A mx = -std::numeric_limits<A>::infinity();
    for (int j = 0; j < V; ++j) mx = std::max(mx, row[j]);
    A s = 0;
    for (int j = 0; j < V; ++j) s += std::exp(row[j] - mx);
    const A lse = mx + std::log(s);
    const int tgt = targets[i];
    losses[i] = lse - row[tgt];
    if (write_grad) {
      for (int j = 0; j < V; ++j) row[j] = dloss * (std::exp(row[j] - lse) - (j == tgt ? A(1) : A(0)));
      for (int j = V; j < Vp; ++j) row[j] = 0;
      store_row(row, logits + static_cast<size_t>(i) * Vp, Vp);
    }
  }
}

template <typename T>
void crossentropy_max(acc_t<T>* maxes, const T* logits, int N, int Vl, int v_real) {
  using A = acc_t<T>;
#pragma omp parallel for schedule(static)
  for (int i = 0; i < N; ++i) {
    const A* row = widened(logits + static_cast<size_t>(i) * Vl, v_real, 0);
    A mx = -std::numeric_limits<A>::infinity();
    for (int j = 0; j < v_real; ++j) mx = std::max(mx, row[j]);
    maxes[i] = mx;
  }
}

template <typename T>
void crossentropy_partials(acc_t<T>* partials, const T* logits, const acc_t<T>* maxes, const int32_t* targets, int N,
                           int Vl, int v_real, int vocab_start) {
  using A = acc_t<T>;
#pragma omp parallel for schedule(static)
  for (int i = 0; i < N; ++i) {
    const A* row = widened(logits + static_cast<size_t>(i) * Vl, v_real, 0);
    A s = 0;
    for (int j = 0; j < v_real; ++j) s += std::exp(row[j] - maxes[i]);
    const int t = targets[i] - vocab_start;
    partials[i] = s;
    partials[N + i] = (t >= 0 && t < v_real) ? row[t] : A(0);
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
    A* row = row_acc(logits + static_cast<size_t>(i) * Vl, Vl);
    const int t = targets[i] - vocab_start;
    for (int j = 0; j < v_real; ++j) row[j] = dloss * (std::exp(row[j] - lse) - (j == t ? A(1) : A(0)));
    for (int j = v_real; j < Vl; ++j) row[j] = 0;
    store_row(row, logits + static_cast<size_t>(i) * Vl, Vl);
  }
}

// A widened row of logits on every thread (slot 0): the whole row (the rank's columns) where the
// gradient is written, at most that where only the max and the partial sums are read.
template <typename T>
void crossentropy_scratch(ScratchNeed& need, int N, int row) {
  if constexpr (is_16bit<T>) {
    need.on_each(0, size_t(row), N);
  } else {
    (void)need, (void)N, (void)row;
  }
}

#define LOOM_INSTANTIATE(T)                                                                                         \
  template void crossentropy_max<T>(acc_t<T>*, const T*, int, int, int);                                            \
  template void crossentropy_partials<T>(acc_t<T>*, const T*, const acc_t<T>*, const int32_t*, int, int, int, int); \
  template void crossentropy_finish<T>(acc_t<T>*, T*, const acc_t<T>*, const acc_t<T>*, const int32_t*, int, int,   \
                                       int, int, acc_t<T>, bool);                                                   \
  template void softmax_crossentropy<T>(acc_t<T>*, T*, const int32_t*, int, int, int, acc_t<T>, bool);         \
  template void crossentropy_scratch<T>(ScratchNeed&, int, int);
LOOM_CPU_FOR_EACH_TYPE(LOOM_INSTANTIATE)
#undef LOOM_INSTANTIATE

}  // namespace loom::cpu
