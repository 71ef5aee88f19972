// Blockwise dequantization (backend_ops.def: dequantize; the formats in kernels/quantize.hpp):
// out[i] = level(code i) * scales[i / block], one product in acc_t<Real> (fp32, double in the
// double instantiation) rounded once to Real. One OpenMP task per group of blocks; every element
// is one IEEE product, so the result does not depend on the thread count.
#include <algorithm>
#include <stdexcept>
#include <string>

#include "kernels/cpu/cpu_ops.hpp"
#include "kernels/quantize.hpp"

namespace loom::cpu {
namespace {

// The signed value of an int8 code's byte (two's complement).
inline int int8_level(uint8_t c) { return (int(c) ^ 0x80) - 128; }

// Code i of a packed NF4 buffer: element 2k in the low nibble of byte k, 2k+1 in the high one.
inline unsigned nf4_code(const uint8_t* codes, size_t i) { return (codes[i / 2] >> ((i & 1) * 4)) & 0xfu; }

}  // namespace

template <typename T>
void dequantize(T* out, const uint8_t* codes, const acc_t<T>* scales, size_t n, int block, int kind) {
  using A = acc_t<T>;
  if (kind != int(QuantKind::Int8) && kind != int(QuantKind::NF4))
    throw std::invalid_argument("dequantize: unknown quantization kind " + std::to_string(kind) +
                                " (0 = int8, 1 = nf4)");
  if (block <= 0) throw std::invalid_argument("dequantize: block must be positive, got " + std::to_string(block));
  if (n == 0) return;
  const size_t bs = size_t(block), nblocks = (n + bs - 1) / bs;
  // The NF4 levels in the accumulation type (exact: float to float or to double).
  A levels[16];
  for (int k = 0; k < 16; ++k) levels[k] = A(kNF4Levels[k]);
#pragma omp parallel for schedule(static)
  for (size_t b = 0; b < nblocks; ++b) {
    const A s = scales[b];
    const size_t i1 = std::min(n, (b + 1) * bs);
    if (kind == int(QuantKind::Int8)) {
      for (size_t i = b * bs; i < i1; ++i) out[i] = T(A(int8_level(codes[i])) * s);
    } else {
      for (size_t i = b * bs; i < i1; ++i) out[i] = T(levels[nf4_code(codes, i)] * s);
    }
  }
}

#define LOOM_INSTANTIATE(T) \
  template void dequantize<T>(T*, const uint8_t*, const acc_t<T>*, size_t, int, int);
LOOM_CPU_FOR_EACH_TYPE(LOOM_INSTANTIATE)
#undef LOOM_INSTANTIATE

}  // namespace loom::cpu
