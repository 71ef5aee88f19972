#pragma once
// CRC-32C (Castagnoli, reflected polynomial 0x82F63B78), as used by TensorBoard event files and
// for Loom's data and checkpoint checksums. crc32c("123456789") == 0xE3069283.
#include <cstddef>
#include <cstdint>

namespace loom {

// Continues `crc` (0 to start) over `n` bytes.
uint32_t crc32c(const void* data, size_t n, uint32_t crc = 0);

// The CRC-32C of A followed by B, from crc_a = crc32c(A), crc_b = crc32c(B) and B's length,
// without the bytes: lets ranks checksum their own pieces of a file in memory and one rank
// assemble the checksum of the whole in file order.
uint32_t crc32c_combine(uint32_t crc_a, uint32_t crc_b, uint64_t len_b);

// crc32c_combine for one fixed len_b, as four byte-table lookups (for the many equal-length
// pieces of a tensor split by columns).
class Crc32cAppender {
 public:
  explicit Crc32cAppender(uint64_t len_b);
  uint32_t operator()(uint32_t crc_a, uint32_t crc_b) const {
    return t_[0][crc_a & 0xFF] ^ t_[1][(crc_a >> 8) & 0xFF] ^ t_[2][(crc_a >> 16) & 0xFF] ^ t_[3][crc_a >> 24] ^ crc_b;
  }

 private:
  uint32_t t_[4][256];
};

}  // namespace loom
