// Elementwise ops over flat buffers: zero, the residual add and scale. One OpenMP loop each
// (each element is one exact IEEE operation, so the result does not depend on the vectorisation
// or the thread count).
#include "kernels/cpu/cpu_ops.hpp"

namespace loom::cpu {

template <typename T>
void zero(T* p, size_t n) {
#pragma omp parallel for schedule(static)
  for (size_t i = 0; i < n; ++i) p[i] = T(0);
}

template <typename T>
void residual_forward(T* out, const T* a, const T* b, size_t n) {
#pragma omp parallel for simd schedule(static)
  for (size_t i = 0; i < n; ++i) out[i] = a[i] + b[i];
}

template <typename T>
void scale(T* x, size_t n, T s) {
#pragma omp parallel for simd schedule(static)
  for (size_t i = 0; i < n; ++i) x[i] *= s;
}

template void zero<float>(float*, size_t);
template void zero<double>(double*, size_t);
template void residual_forward<float>(float*, const float*, const float*, size_t);
template void residual_forward<double>(double*, const double*, const double*, size_t);
template void scale<float>(float*, size_t, float);
template void scale<double>(double*, size_t, double);

}  // namespace loom::cpu
