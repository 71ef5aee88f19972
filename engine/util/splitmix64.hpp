#pragma once
// SplitMix64 (Steele, Lea, Flood 2014): a 64-bit mixing function, the one source of
// pseudo-randomness Loom uses wherever a value must be a pure function of a counter
// (initialisation, sample order, the prep val split), so that it can be recomputed anywhere.
#include <cstdint>

namespace loom {

inline uint64_t splitmix64(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

}  // namespace loom
