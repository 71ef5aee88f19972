#include "engine/data/sampler.hpp"
#include "engine/util/splitmix64.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <stdexcept>
#include <string>
#include <utility>

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

std::vector<uint32_t> blend_shares(const std::vector<double>& weights) {
  const size_t n = weights.size();
  if (n == 0) throw std::runtime_error("a blend of no datasets");
  if (n > kBlendBlock) throw std::runtime_error("a blend of more than " + std::to_string(kBlendBlock) + " datasets");
  // Relative to the largest first, so that no sum of finite weights overflows.
  const double top = n ? *std::max_element(weights.begin(), weights.end()) : 1.0;
  double sum = 0;
  for (double w : weights) sum += w / top;
  std::vector<uint32_t> share(n);
  std::vector<std::pair<double, size_t>> rest;  // (fraction left over, part)
  uint32_t given = 0;
  for (size_t i = 0; i < n; ++i) {
    const double ideal = weights[i] / top / sum * kBlendBlock;
    share[i] = uint32_t(std::floor(ideal));
    given += share[i];
    rest.emplace_back(ideal - std::floor(ideal), i);
  }
  // Largest remainders first (the earlier part on a tie).
  std::stable_sort(rest.begin(), rest.end(), [](const auto& a, const auto& b) { return a.first > b.first; });
  for (size_t j = 0; given < kBlendBlock; ++j, ++given) ++share[rest[j % n].second];
  // Every part at least once per block, taken from the largest.
  for (size_t i = 0; i < n; ++i)
    if (share[i] == 0) {
      ++share[i];
      --*std::max_element(share.begin(), share.end());
    }
  return share;
}

SampleIndex::SampleIndex(const TokenDataset& data, int seq_len) : SampleIndex(data.shards, seq_len) {
  if (data.blend.empty()) return;
  std::vector<double> weights;
  for (const BlendPart& b : data.blend) weights.push_back(b.weight);
  const std::vector<uint32_t> share = blend_shares(weights);
  for (size_t i = 0; i < data.blend.size(); ++i) {
    const BlendPart& b = data.blend[i];
    const uint64_t first = b.first_shard < first_.size() ? first_[b.first_shard] : total_;
    const uint64_t end = b.first_shard + b.shard_count < first_.size() ? first_[b.first_shard + b.shard_count] : total_;
    if (end == first) throw std::runtime_error(b.source + ": holds no complete sample of seq_len+1 tokens");
    parts_.push_back({first, end - first, share[i]});
  }
  // A largest-deficit rule (as Megatron's): each position of the block to the part furthest
  // below its share so far (in whole units: share * (i + 1) - taken * block), among those with
  // positions left in the block; the lowest part on a tie.
  std::vector<uint32_t> taken(parts_.size(), 0);
  block_part_.resize(kBlendBlock);
  block_rank_.resize(kBlendBlock);
  for (uint32_t i = 0; i < kBlendBlock; ++i) {
    size_t best = parts_.size();
    int64_t best_deficit = 0;
    for (size_t d = 0; d < parts_.size(); ++d) {
      if (taken[d] == parts_[d].per_block) continue;
      const int64_t deficit = int64_t(parts_[d].per_block) * (i + 1) - int64_t(taken[d]) * kBlendBlock;
      if (best == parts_.size() || deficit > best_deficit) best = d, best_deficit = deficit;
    }
    block_part_[i] = uint16_t(best);
    block_rank_[i] = taken[best]++;
  }
}

void SampleIndex::blend_position(uint64_t p, size_t& part, uint64_t& n) const {
  const uint64_t i = p % kBlendBlock;
  part = block_part_[i];
  n = (p / kBlendBlock) * parts_[part].per_block + block_rank_[i];
}

uint64_t SampleIndex::shuffled(uint64_t seed, uint64_t p) const {
  if (parts_.empty()) return EpochPermutation(total_, seed, p / total_)(p % total_);
  size_t d = 0;
  uint64_t n = 0;
  blend_position(p, d, n);
  // Each part its own epochs, under its own seed.
  const Part& part = parts_[d];
  const uint64_t part_seed = splitmix64(seed ^ (0x9e3779b97f4a7c15ull * (d + 1)));
  return part.first + EpochPermutation(part.size, part_seed, n / part.size)(n % part.size);
}

std::string SampleIndex::blend_order() const {
  std::string out;
  for (const Part& part : parts_) {
    char b[96];
    std::snprintf(b, sizeof b, "%s%g%% of %llu", out.empty() ? "" : " + ", part.per_block * 100.0 / kBlendBlock,
                  (unsigned long long)part.size);
    out += b;
  }
  return out.empty() ? out : out + " samples";
}

uint64_t SampleIndex::distinct_in_order(uint64_t positions) const {
  if (parts_.empty()) return std::min(positions, total_);
  std::vector<uint64_t> drawn(parts_.size(), 0);
  for (size_t d = 0; d < parts_.size(); ++d) drawn[d] = (positions / kBlendBlock) * parts_[d].per_block;
  for (uint64_t i = 0; i < positions % kBlendBlock; ++i) ++drawn[block_part_[i]];
  uint64_t distinct = 0;
  for (size_t d = 0; d < parts_.size(); ++d) distinct += std::min(drawn[d], parts_[d].size);
  return distinct;
}

uint64_t SampleIndex::repeat_free_in_order(uint64_t positions) const {
  // A start with no repeat has one fewer position without one, so the lengths with none form a
  // prefix of [0, positions]: bisect for its end (distinct_in_order is at most kBlendBlock steps).
  uint64_t lo = 0, hi = positions;  // lo is repeat-free; the answer lies in [lo, hi]
  while (lo < hi) {
    const uint64_t mid = lo + (hi - lo + 1) / 2;
    if (distinct_in_order(mid) == mid)
      lo = mid;
    else
      hi = mid - 1;
  }
  return lo;
}

uint64_t SampleIndex::in_order(uint64_t p) const {
  if (parts_.empty()) return p % total_;
  size_t d = 0;
  uint64_t n = 0;
  blend_position(p, d, n);
  return parts_[d].first + n % parts_[d].size;
}

}  // namespace loom
