#include "engine/pretrained/mapped_floats.hpp"

#include <algorithm>
#include <cstdint>
#include <cstring>

#include "kernels/dtype.hpp"

namespace loom {

void read_mapped_floats(const MappedFile& f, size_t at, size_t count, StoredFloat kind, float* out) {
  const size_t elem = stored_float_bytes(kind);
  for (size_t lo = 0; lo < count; lo += kMappedFloatPiece) {
    const size_t n = std::min(kMappedFloatPiece, count - lo);
    const unsigned char* p = f.data() + at + lo * elem;
    if (kind == StoredFloat::F32) {
      std::memcpy(out + lo, p, n * 4);  // little-endian host (x86-64, aarch64)
    } else {
      for (size_t i = 0; i < n; ++i) {
        const uint16_t b = uint16_t(p[2 * i] | (p[2 * i + 1] << 8));
        out[lo + i] = kind == StoredFloat::BF16 ? float(bf16::from_bits(b)) : fp16::to_float(b);
      }
    }
    f.drop_pages(at + lo * elem, n * elem);
  }
}

}  // namespace loom
