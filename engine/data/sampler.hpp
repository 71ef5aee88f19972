#pragma once
// Which tokens each rank trains on, as pure functions of (seed, position), so that:
//  - a sample is a window of seq_len+1 tokens; sample k of a shard starts at token k*seq_len
//    (windows overlap by the one token that is both the last target and the next input);
//  - the samples of an epoch are visited in a seeded random order (a bijection, no table in
//    memory), and every sample is seen exactly once per epoch;
//  - global batch s is positions [s*GB, (s+1)*GB) of the endless sequence epoch 0, epoch 1, ...,
//    whatever dp and micro_batch are; data-parallel rank r of dp takes the contiguous slice
//    [r*GB/dp, (r+1)*GB/dp) of it, micro-step m the next B of those.
// The loader's whole state is therefore the next step number.
#include <cstdint>
#include <vector>

#include "engine/data/token_shard.hpp"

namespace loom {

// A seeded bijection of [0, n): a Feistel network on the next power of four, cycle-walked.
class EpochPermutation {
 public:
  EpochPermutation(uint64_t n, uint64_t seed, uint64_t epoch);
  uint64_t operator()(uint64_t i) const;

 private:
  uint64_t n_, key_;
  int half_bits_;
};

class SampleIndex {
 public:
  SampleIndex(const std::vector<TokenShard>& shards, int seq_len);
  uint64_t size() const { return total_; }  // samples per epoch
  int seq_len() const { return T_; }
  // Copies sample `k` (in [0, size())) into tokens[T] and targets[T].
  void fill(uint64_t k, int32_t* tokens, int32_t* targets) const;

 private:
  const std::vector<TokenShard>& shards_;
  std::vector<uint64_t> first_;  // first sample number of each shard
  uint64_t total_ = 0;
  int T_;
};

// The sample at global position p of the shuffled endless stream.
uint64_t sample_at(const SampleIndex& index, uint64_t seed, uint64_t p);

}  // namespace loom
