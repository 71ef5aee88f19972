// Elementwise ops over flat buffers: zero, the residual add, scale and dtype conversion. One OpenMP loop each
// (each element is one exact IEEE operation, so the result does not depend on the vectorisation
// or the thread count).
#include <stdexcept>
#include <type_traits>

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
void scale(acc_t<T>* x, size_t n, acc_t<T> s) {
#pragma omp parallel for simd schedule(static)
  for (size_t i = 0; i < n; ++i) x[i] *= s;
}

// Runs at any dtype pair (the template parameter is the dispatch's, dst's dtype): each element is
// widened to float (exact) and narrowed once to dst's type.
template <typename Real>
void convert(TypedPtr dst, ConstTypedPtr src, size_t n) {
  auto run = [&](auto* d, const auto* s) {
    using D = std::remove_pointer_t<decltype(d)>;
#pragma omp parallel for simd schedule(static)
    for (size_t i = 0; i < n; ++i) d[i] = D(static_cast<float>(s[i]));
  };
  auto with_src = [&](auto* d) {
    switch (src.dtype) {
      case DType::f32: return run(d, src.as<float>());
      case DType::bf16: return run(d, src.as<bf16>());
      case DType::f16: return run(d, src.as<fp16>());
      default: throw std::logic_error("convert: source dtype must be fp32, bf16 or fp16");
    }
  };
  switch (dst.dtype) {
    case DType::f32: return with_src(dst.as<float>());
    case DType::bf16: return with_src(dst.as<bf16>());
    case DType::f16: return with_src(dst.as<fp16>());
    default: throw std::logic_error("convert: destination dtype must be fp32, bf16 or fp16");
  }
}

template void convert<float>(TypedPtr, ConstTypedPtr, size_t);
template void convert<double>(TypedPtr, ConstTypedPtr, size_t);
template void convert<bf16>(TypedPtr, ConstTypedPtr, size_t);
template void convert<fp16>(TypedPtr, ConstTypedPtr, size_t);
template void zero<float>(float*, size_t);
template void zero<double>(double*, size_t);
template void residual_forward<float>(float*, const float*, const float*, size_t);
template void residual_forward<double>(double*, const double*, const double*, size_t);
template void scale<float>(float*, size_t, float);
template void scale<double>(double*, size_t, double);

}  // namespace loom::cpu
