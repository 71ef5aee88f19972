// Blockwise int8 / NF4 quantization on the host (kernels/quantize.hpp has the formats). One
// OpenMP task per block; each block's result depends on that block alone, so the output does
// not depend on the thread count.
#include "kernels/quantize.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <stdexcept>
#include <string>

namespace loom {
namespace {

// The midpoints between adjacent NF4 levels, in double. Each is exact: the sum of two floats
// whose exponents differ by a few bits fits a double's 53-bit significand.
struct NF4Midpoints {
  double m[15];
  NF4Midpoints() {
    for (int i = 0; i < 15; ++i) m[i] = (double(kNF4Levels[i]) + double(kNF4Levels[i + 1])) / 2;
  }
};

// The code of the level nearest to x (x in [-1, 1]): the number of midpoints below x, so that
// x exactly on a midpoint takes the lower level.
uint8_t nf4_code(const NF4Midpoints& mid, double x) {
  return uint8_t(std::lower_bound(mid.m, mid.m + 15, x) - mid.m);
}

}  // namespace

const char* quant_kind_name(QuantKind kind) {
  switch (kind) {
    case QuantKind::Int8: return "int8";
    case QuantKind::NF4: return "nf4";
  }
  return "?";
}

size_t quantized_bytes(QuantKind kind, size_t n) {
  switch (kind) {
    case QuantKind::Int8: return n;
    case QuantKind::NF4: return (n + 1) / 2;
  }
  throw std::invalid_argument("quantized_bytes: unknown quantization kind " + std::to_string(int(kind)));
}

void quantize_blockwise(QuantKind kind, const float* w, size_t n, int block, uint8_t* codes, float* scales) {
  const std::string op = "quantize_blockwise: ";
  if (kind != QuantKind::Int8 && kind != QuantKind::NF4)
    throw std::invalid_argument(op + "unknown quantization kind " + std::to_string(int(kind)) +
                                " (0 = int8, 1 = nf4)");
  if (block <= 0 || block % 2 != 0)
    throw std::invalid_argument(op + "block must be even and positive, got " + std::to_string(block));
  if (n % size_t(block) != 0)
    throw std::invalid_argument(op + "n = " + std::to_string(n) + " is not a multiple of the block size " +
                                std::to_string(block));
  if (n == 0) return;
  if (!w || !codes || !scales) throw std::invalid_argument(op + "null weights, codes or scales");

  const NF4Midpoints mid;
  const size_t nblocks = n / size_t(block);
  size_t first_bad = std::numeric_limits<size_t>::max();  // the first non-finite weight's index
#pragma omp parallel for schedule(static) reduction(min : first_bad)
  for (size_t b = 0; b < nblocks; ++b) {
    const float* x = w + b * size_t(block);
    float absmax = 0;
    bool finite = true;
    for (int i = 0; i < block; ++i) {
      finite = finite && std::isfinite(x[i]);
      absmax = std::max(absmax, std::fabs(x[i]));
    }
    if (!finite) {
      for (int i = 0; i < block; ++i)
        if (!std::isfinite(x[i])) {
          first_bad = std::min(first_bad, b * size_t(block) + size_t(i));
          break;
        }
      continue;
    }
    if (kind == QuantKind::Int8) {
      uint8_t* c = codes + b * size_t(block);
      const float scale = absmax / 127.0f;
      scales[b] = scale;
      for (int i = 0; i < block; ++i) {
        // |x| <= absmax, so |x / scale| <= 127 up to the rounding of scale: the clamp only
        // catches 127.000001.
        const double q = scale > 0 ? std::round(double(x[i]) / double(scale)) : 0.0;
        const int v = int(std::clamp(q, -127.0, 127.0));
        c[i] = uint8_t(v & 0xff);  // the int8's two's-complement byte
      }
    } else {
      uint8_t* c = codes + b * size_t(block) / 2;
      scales[b] = absmax;
      for (int i = 0; i < block; i += 2) {
        const uint8_t lo = absmax > 0 ? nf4_code(mid, double(x[i]) / double(absmax)) : kNF4Zero;
        const uint8_t hi = absmax > 0 ? nf4_code(mid, double(x[i + 1]) / double(absmax)) : kNF4Zero;
        c[i / 2] = uint8_t(lo | (hi << 4));
      }
    }
  }
  if (first_bad != std::numeric_limits<size_t>::max())
    throw std::invalid_argument(op + "weight " + std::to_string(first_bad) + " is not finite (" +
                                std::to_string(w[first_bad]) + ")");
}

}  // namespace loom
