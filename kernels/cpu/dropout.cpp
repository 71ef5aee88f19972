// Inverted dropout with the counter-based mask of kernels/dropout_mask.hpp (backend_ops.def:
// dropout). Rows in parallel; out may alias x.
#include "kernels/cpu/cpu_ops.hpp"
#include "kernels/dropout_mask.hpp"

namespace loom::cpu {

template <typename T>
void dropout(T* out, const T* x, acc_t<T> p, uint64_t seed, int rows, int cols, int col_offset, int ld) {
  using A = acc_t<T>;
  const A keep_scale = p < A(1) ? A(1) / (A(1) - p) : A(0);
#pragma omp parallel for schedule(static)
  for (int r = 0; r < rows; ++r) {
    const uint64_t base = uint64_t(r) * uint64_t(ld) + uint64_t(col_offset);
    for (int c = 0; c < cols; ++c) {
      const size_t i = size_t(r) * size_t(cols) + size_t(c);
      out[i] = dropout_keep(seed, base + uint64_t(c), float(p)) ? T(A(x[i]) * keep_scale) : T(A(0));
    }
  }
}

#define LOOM_INSTANTIATE(T) template void dropout<T>(T*, const T*, acc_t<T>, uint64_t, int, int, int, int);
LOOM_CPU_FOR_EACH_TYPE(LOOM_INSTANTIATE)
#undef LOOM_INSTANTIATE

}  // namespace loom::cpu
