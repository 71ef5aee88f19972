#pragma once
// CRC-32C (Castagnoli, reflected polynomial 0x82F63B78), as used by TensorBoard event files and
// for Loom's data and checkpoint checksums. crc32c("123456789") == 0xE3069283.
#include <cstddef>
#include <cstdint>

namespace loom {

// Continues `crc` (0 to start) over `n` bytes.
uint32_t crc32c(const void* data, size_t n, uint32_t crc = 0);

}  // namespace loom
