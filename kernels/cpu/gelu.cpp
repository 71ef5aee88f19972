// GELU, tanh approximation (GPT-2): 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))).
// tanh goes through Eigen's array tanh, which is vectorised (AVX-512) for float: libm's scalar
// tanhf made GELU a quarter of a training step. 16-bit storage: each task widens its chunk into
// fp32 scratch on the stack, runs the fp32 expression and rounds the result once.
#include <Eigen/Core>
#include <algorithm>

#include "kernels/cpu/convert_simd.hpp"
#include "kernels/cpu/cpu_ops.hpp"

namespace loom::cpu {
namespace {

template <typename T>
constexpr T kScale = T(0.7978845608028654);  // sqrt(2/pi)
template <typename T>
constexpr T kCubic = T(0.044715);
constexpr size_t kChunk = 1 << 14;      // elements per task: fits L1/L2, amortises the OpenMP loop
constexpr size_t kLowpChunk = 1 << 10;  // elements per 16-bit task (2 x 4 KB of fp32 on the stack)

template <typename T>
using Arr = Eigen::Array<T, Eigen::Dynamic, 1>;
template <typename T>
using ArrMap = Eigen::Map<Arr<T>>;
template <typename T>
using ConstArrMap = Eigen::Map<const Arr<T>>;

// T is float or double here.
template <typename T>
void forward_chunk(T* out, const T* inp, size_t len) {
  ConstArrMap<T> x(inp, len);
  ArrMap<T> o(out, len);
  o = T(0.5) * x * (T(1) + (kScale<T> * (x + kCubic<T> * x.cube())).tanh());
}

template <typename T>
void backward_chunk(T* dinp, const T* inp, const T* dout, size_t len) {
  ConstArrMap<T> x(inp, len), d(dout, len);
  ArrMap<T> di(dinp, len);  // may alias dout: each element is read before it is written
  const Arr<T> th = (kScale<T> * (x + kCubic<T> * x.cube())).tanh();
  di = d * (T(0.5) * (T(1) + th) +
            T(0.5) * x * (T(1) - th.square()) * kScale<T> * (T(1) + T(3) * kCubic<T> * x.square()));
}

}  // namespace

template <typename T>
void gelu_forward(T* out, const T* inp, size_t n) {
  const size_t chunk = is_16bit<T> ? kLowpChunk : kChunk;
  const size_t nchunks = (n + chunk - 1) / chunk;
#pragma omp parallel for schedule(static)
  for (size_t c = 0; c < nchunks; ++c) {
    const size_t i0 = c * chunk, len = std::min(chunk, n - i0);
    if constexpr (is_16bit<T>) {
      alignas(64) float x[kLowpChunk], o[kLowpChunk];
      widen(inp + i0, x, len);
      forward_chunk(o, x, len);
      narrow(o, out + i0, len);
    } else {
      forward_chunk(out + i0, inp + i0, len);
    }
  }
}

template <typename T>
void gelu_backward(T* dinp, const T* inp, const T* dout, size_t n) {
  const size_t chunk = is_16bit<T> ? kLowpChunk : kChunk;
  const size_t nchunks = (n + chunk - 1) / chunk;
#pragma omp parallel for schedule(static)
  for (size_t c = 0; c < nchunks; ++c) {
    const size_t i0 = c * chunk, len = std::min(chunk, n - i0);
    if constexpr (is_16bit<T>) {
      alignas(64) float x[kLowpChunk], d[kLowpChunk];
      widen(inp + i0, x, len);
      widen(dout + i0, d, len);
      backward_chunk(d, x, d, len);
      narrow(d, dinp + i0, len);  // dinp may alias dout: dout's chunk was read above
    } else {
      backward_chunk(dinp + i0, inp + i0, dout + i0, len);
    }
  }
}

#define LOOM_INSTANTIATE(T)                            \
  template void gelu_forward<T>(T*, const T*, size_t); \
  template void gelu_backward<T>(T*, const T*, const T*, size_t);
LOOM_CPU_FOR_EACH_TYPE(LOOM_INSTANTIATE)
#undef LOOM_INSTANTIATE

}  // namespace loom::cpu
