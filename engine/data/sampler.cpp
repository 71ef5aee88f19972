#include "engine/data/sampler.hpp"
#include "engine/util/splitmix64.hpp"

#include <algorithm>
#include <stdexcept>

namespace loom {
namespace {
constexpr int kRounds = 6;
}  // namespace

EpochPermutation::EpochPermutation(uint64_t n, uint64_t seed, uint64_t epoch)
    : n_(n), key_(splitmix64(splitmix64(seed ^ 0xda7a5eedull) + epoch)) {
  // Domain 2^(2h) >= n, at most 4n, so cycle-walking takes < 4 tries on average.
  half_bits_ = 1;
  while ((uint64_t(1) << (2 * half_bits_)) < n_) ++half_bits_;
}

uint64_t EpochPermutation::operator()(uint64_t i) const {
  const uint64_t mask = (uint64_t(1) << half_bits_) - 1;
  uint64_t x = i;
  do {
    uint64_t l = x >> half_bits_, r = x & mask;
    for (int round = 0; round < kRounds; ++round) {
      const uint64_t f = splitmix64(key_ ^ (uint64_t(round) << 56) ^ r) & mask;
      const uint64_t nl = r;
      r = l ^ f;
      l = nl;
    }
    x = (l << half_bits_) | r;
  } while (x >= n_);  // cycle-walk back into [0, n)
  return x;
}

SampleIndex::SampleIndex(const std::vector<TokenShard>& shards, int seq_len) : shards_(shards), T_(seq_len) {
  for (const auto& s : shards_) {
    first_.push_back(total_);
    total_ += s.count > size_t(T_) ? (s.count - 1) / T_ : 0;
  }
  if (total_ == 0) throw std::runtime_error("the dataset holds no complete sample of seq_len+1 tokens");
}

void SampleIndex::fill(uint64_t k, int32_t* tokens, int32_t* targets) const {
  const size_t s = size_t(std::upper_bound(first_.begin(), first_.end(), k) - first_.begin()) - 1;
  const TokenShard& sh = shards_[s];
  const size_t off = size_t(k - first_[s]) * T_;
  for (int t = 0; t < T_; ++t) {
    tokens[t] = int32_t(sh.at(off + t));
    targets[t] = int32_t(sh.at(off + t + 1));
  }
}

uint64_t sample_at(const SampleIndex& index, uint64_t seed, uint64_t p) {
  const uint64_t n = index.size();
  return EpochPermutation(n, seed, p / n)(p % n);
}

}  // namespace loom
