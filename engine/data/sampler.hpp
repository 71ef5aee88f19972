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
// A weighted blend (TokenDataset::blend) keeps all of that: the stream is cut into blocks of
// kBlendBlock positions, each part gets a fixed number of every block (its weight's share,
// rounded by largest remainder, at least one) spread through the block by a largest-deficit
// rule like Megatron's (each position to the part furthest below its share so far: every prefix
// within one sample of the shares for two parts, within two for more), and a part's n-th position takes the
// n-th sample of the part's own stream (its own seeded epochs). So the part and the sample at
// any position are computed without a table over the run, and each part is seen once per its
// own epoch, a small part more often than a large one.
#include <cstdint>
#include <string>
#include <vector>

#include "engine/data/token_dataset.hpp"
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

constexpr uint32_t kBlendBlock = 10000;  // a blend's shares are whole 1/10000ths

class SampleIndex {
 public:
  SampleIndex(const std::vector<TokenShard>& shards, int seq_len);
  // A dataset, blended or not. Throws naming the part of a blend that holds no sample.
  SampleIndex(const TokenDataset& data, int seq_len);
  SampleIndex(TokenDataset&&, int) = delete;  // it keeps a reference to the shards
  uint64_t size() const { return total_; }  // samples per epoch (a blend: of all its parts)
  int seq_len() const { return T_; }
  // Copies sample `k` (in [0, size())) into tokens[T] and targets[T].
  void fill(uint64_t k, int32_t* tokens, int32_t* targets) const;

  struct Part {
    uint64_t first = 0, size = 0;  // its samples are [first, first + size)
    uint32_t per_block = 0;        // its positions in every kBlendBlock
  };
  const std::vector<Part>& parts() const { return parts_; }  // empty: not a blend
  // The sample at stream position p: of the seeded shuffle (training), or in order (validation).
  uint64_t shuffled(uint64_t seed, uint64_t p) const;
  uint64_t in_order(uint64_t p) const;
  // What a blend's order depends on besides the seed, as a checkpoint records it: each part's
  // share and size ("80% of 38118 + 20% of 549 samples"); "" when it is no blend. (A change to
  // how shares or positions are drawn must change this text, so old checkpoints see the change.)
  std::string blend_order() const;
  // How many distinct samples the first `positions` of the in-order stream hold (validation).
  uint64_t distinct_in_order(uint64_t positions) const;
  // The longest start of the in-order stream, at most `positions` long, in which no sample comes
  // twice: a blend's small part repeats long before the whole has been seen once.
  uint64_t repeat_free_in_order(uint64_t positions) const;

 private:
  // A blend: the part of position p and how many of its positions came before.
  void blend_position(uint64_t p, size_t& part, uint64_t& n) const;

  const std::vector<TokenShard>& shards_;
  std::vector<uint64_t> first_;  // first sample number of each shard
  uint64_t total_ = 0;
  int T_;
  std::vector<Part> parts_;
  std::vector<uint16_t> block_part_;  // a blend: each block position's part
  std::vector<uint32_t> block_rank_;  // and how many of its part's positions precede it in the block
};

// Each part's positions in a block of kBlendBlock: the weights' shares by largest remainder, at
// least one each (throws past kBlendBlock parts).
std::vector<uint32_t> blend_shares(const std::vector<double>& weights);

// The sample at global position p of the shuffled endless stream.
inline uint64_t sample_at(const SampleIndex& index, uint64_t seed, uint64_t p) { return index.shuffled(seed, p); }

}  // namespace loom
