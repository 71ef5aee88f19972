// KV-cache attention for generation (backend_ops.def: attention_cached). One task per (batch,
// head, new query): its scores over the cached keys, the softmax and the weighted sum of the
// cached values, all in acc_t. Decoding is one query per step, so this is dot products, not the
// blocked products of attention.cpp.
#include <algorithm>
#include <cmath>
#include <vector>

#include "kernels/cpu/cpu_ops.hpp"

namespace loom::cpu {

template <typename T>
void attention_cached(T* out, T* kcache, T* vcache, const T* qkv, int B, int Tq, int pos, int Tmax, int C, int NH) {
  using A = acc_t<T>;
  const int hs = C / NH;
  const A scale = A(1) / std::sqrt(A(hs));
  // The new keys and values into the cache first: every query below reads them.
#pragma omp parallel for collapse(2) schedule(static)
  for (int b = 0; b < B; ++b)
    for (int i = 0; i < Tq; ++i) {
      const T* row = qkv + (size_t(b) * Tq + i) * 3 * C;
      const size_t at = (size_t(b) * Tmax + pos + i) * C;
      std::copy(row + C, row + 2 * C, kcache + at);
      std::copy(row + 2 * C, row + 3 * C, vcache + at);
    }
#pragma omp parallel
  {
    std::vector<A> score(static_cast<size_t>(pos + Tq)), acc(static_cast<size_t>(hs));
#pragma omp for collapse(3) schedule(static)
    for (int b = 0; b < B; ++b)
      for (int h = 0; h < NH; ++h)
        for (int i = 0; i < Tq; ++i) {
          const T* q = qkv + (size_t(b) * Tq + i) * 3 * C + size_t(h) * hs;
          const int keys = pos + i + 1;
          A maxv = -INFINITY;
          for (int t = 0; t < keys; ++t) {
            const T* k = kcache + (size_t(b) * Tmax + t) * C + size_t(h) * hs;
            A dot = 0;
            for (int d = 0; d < hs; ++d) dot += A(q[d]) * A(k[d]);
            score[size_t(t)] = dot * scale;
            maxv = std::max(maxv, score[size_t(t)]);
          }
          A sum = 0;
          for (int t = 0; t < keys; ++t) sum += (score[size_t(t)] = std::exp(score[size_t(t)] - maxv));
          std::fill(acc.begin(), acc.end(), A(0));
          for (int t = 0; t < keys; ++t) {
            const T* v = vcache + (size_t(b) * Tmax + t) * C + size_t(h) * hs;
            const A p = score[size_t(t)] / sum;
            for (int d = 0; d < hs; ++d) acc[size_t(d)] += p * A(v[d]);
          }
          T* o = out + (size_t(b) * Tq + i) * C + size_t(h) * hs;
          for (int d = 0; d < hs; ++d) o[d] = T(acc[size_t(d)]);
        }
  }
}

#define LOOM_INSTANTIATE(T) \
  template void attention_cached<T>(T*, T*, T*, const T*, int, int, int, int, int, int);
LOOM_CPU_FOR_EACH_TYPE(LOOM_INSTANTIATE)
#undef LOOM_INSTANTIATE

}  // namespace loom::cpu
