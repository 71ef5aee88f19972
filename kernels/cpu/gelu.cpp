// GELU, tanh approximation (GPT-2): 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))).
// tanh goes through Eigen's array tanh, which is vectorised (AVX-512) for float: libm's scalar
// tanhf made GELU a quarter of a training step.
#include <Eigen/Core>
#include <algorithm>

#include "kernels/cpu/cpu_ops.hpp"

namespace loom::cpu {
namespace {

template <typename T>
constexpr T kScale = T(0.7978845608028654);  // sqrt(2/pi)
template <typename T>
constexpr T kCubic = T(0.044715);
constexpr size_t kChunk = 1 << 14;  // elements per task: fits L1/L2, amortises the OpenMP loop

template <typename T>
using Arr = Eigen::Array<T, Eigen::Dynamic, 1>;
template <typename T>
using ArrMap = Eigen::Map<Arr<T>>;
template <typename T>
using ConstArrMap = Eigen::Map<const Arr<T>>;

}  // namespace

template <typename T>
void gelu_forward(T* out, const T* inp, size_t n) {
  const size_t nchunks = (n + kChunk - 1) / kChunk;
#pragma omp parallel for schedule(static)
  for (size_t c = 0; c < nchunks; ++c) {
    const size_t i0 = c * kChunk, len = std::min(kChunk, n - i0);
    ConstArrMap<T> x(inp + i0, len);
    ArrMap<T> o(out + i0, len);
    o = T(0.5) * x * (T(1) + (kScale<T> * (x + kCubic<T> * x.cube())).tanh());
  }
}

template <typename T>
void gelu_backward(T* dinp, const T* inp, const T* dout, size_t n) {
  const size_t nchunks = (n + kChunk - 1) / kChunk;
#pragma omp parallel for schedule(static)
  for (size_t c = 0; c < nchunks; ++c) {
    const size_t i0 = c * kChunk, len = std::min(kChunk, n - i0);
    ConstArrMap<T> x(inp + i0, len), d(dout + i0, len);
    ArrMap<T> di(dinp + i0, len);  // may alias dout: each element is read before it is written
    const Arr<T> th = (kScale<T> * (x + kCubic<T> * x.cube())).tanh();
    di = d * (T(0.5) * (T(1) + th) +
              T(0.5) * x * (T(1) - th.square()) * kScale<T> * (T(1) + T(3) * kCubic<T> * x.square()));
  }
}

template void gelu_forward<float>(float*, const float*, size_t);
template void gelu_forward<double>(double*, const double*, size_t);
template void gelu_backward<float>(float*, const float*, const float*, size_t);
template void gelu_backward<double>(double*, const double*, const double*, size_t);

}  // namespace loom::cpu
