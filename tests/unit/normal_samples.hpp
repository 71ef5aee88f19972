#pragma once
// n values ~ N(0, scale^2) for the op tests: Box-Muller on a 64-bit LCG, so the same numbers on
// every platform and compiler (no <random> distribution, whose output is implementation-defined).
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <vector>

inline std::vector<float> randn(size_t n, uint64_t seed, float scale = 1.0f) {
  std::vector<float> v(n);
  uint64_t s = seed * 0x9E3779B97F4A7C15ull + 1;
  for (auto& x : v) {
    s = s * 6364136223846793005ull + 1442695040888963407ull;
    const double u1 = ((s >> 11) + 1) * (1.0 / 9007199254740993.0);
    s = s * 6364136223846793005ull + 1442695040888963407ull;
    const double u2 = (s >> 11) * (1.0 / 9007199254740992.0);
    x = float(std::sqrt(-2 * std::log(u1)) * std::cos(6.283185307179586 * u2)) * scale;
  }
  return v;
}
