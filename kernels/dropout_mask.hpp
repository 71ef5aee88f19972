#pragma once
// The dropout op's mask (backend_ops.def: dropout), shared by the CPU and CUDA backends so both
// keep exactly the same elements: element `index` of a call with `seed` is kept unless the
// uniform in [0, 1) made of the top 24 bits of splitmix64(seed ^ splitmix64(index)) is below p.
#include <cstdint>

#if defined(__CUDACC__)
#define LOOM_HOST_DEVICE __host__ __device__
#else
#define LOOM_HOST_DEVICE
#endif

namespace loom {

LOOM_HOST_DEVICE inline uint64_t dropout_mix(uint64_t x) {  // SplitMix64's finaliser
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

LOOM_HOST_DEVICE inline bool dropout_keep(uint64_t seed, uint64_t index, float p) {
  const uint64_t h = dropout_mix(seed ^ dropout_mix(index));
  return float(h >> 40) * (1.0f / 16777216.0f) >= p;  // 24 bits: exact in fp32
}

}  // namespace loom
