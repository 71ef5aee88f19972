// The sampler's promises: epoch permutations are bijections; exact epoch coverage, disjoint
// ranks, the same global batches for any dp and micro_batch; exact resume.
#include <catch2/catch.hpp>

#include <set>

#include "engine/data/data_loader.hpp"
#include "engine/data/sampler.hpp"
#include "engine/data/token_dataset.hpp"
#include "data_test_files.hpp"

using namespace loom;
using namespace loom::test;

TEST_CASE("epoch permutations are bijections") {
  for (uint64_t n : {1ull, 2ull, 3ull, 17ull, 1000ull, 4097ull}) {
    EpochPermutation p(n, 42, 3);
    std::vector<bool> seen(n, false);
    for (uint64_t i = 0; i < n; ++i) {
      uint64_t j = p(i);
      REQUIRE(j < n);
      REQUIRE_FALSE(seen[j]);
      seen[j] = true;
    }
  }
  // Different epochs shuffle differently.
  EpochPermutation a(1000, 42, 0), b(1000, 42, 1);
  int same = 0;
  for (uint64_t i = 0; i < 1000; ++i) same += a(i) == b(i);
  CHECK(same < 20);
}

namespace {
// A dataset with distinct, recognisable samples: token at position i is i % 997 (+1 per shard).
// Written once per directory: rewriting a file another loader has mapped would pull the pages
// from under it.
TokenDataset counting_dataset(const fs::path& dir) {
  if (fs::exists(dir / "b.bin")) return open_dataset(dir.string(), "llmc", "data.train", "train");
  std::vector<uint16_t> a(1601), b(999);
  for (size_t i = 0; i < a.size(); ++i) a[i] = uint16_t(i % 997);
  for (size_t i = 0; i < b.size(); ++i) b[i] = uint16_t(1 + i % 997);
  write_llmc(dir / "a.bin", a);
  write_llmc(dir / "b.bin", b);
  return open_dataset(dir.string(), "llmc", "data.train", "train");
}
}  // namespace

TEST_CASE("ranks cover each epoch exactly once, disjointly, with the same global batches for any layout") {
  auto dir = fresh_dir("sampler");
  const int T = 16, GB = 8;
  // Concatenate every rank's share of each step, rank by rank: the global batch.
  auto global_batches = [&](int dp, int B, int steps) {
    std::vector<std::vector<int32_t>> out(static_cast<size_t>(steps));
    for (int r = 0; r < dp; ++r) {
      DataLoader dl(counting_dataset(dir), LoaderLayout{T, B, GB / (B * dp), r, dp, 7});
      for (int s = 0; s < steps; ++s) {
        StepBatch b = dl.next();
        out[size_t(s)].insert(out[size_t(s)].end(), b.tokens.begin(), b.tokens.end());
      }
    }
    return out;
  };
  const int steps = 40;
  auto ref = global_batches(1, 4, steps);
  CHECK(global_batches(2, 4, steps) == ref);
  CHECK(global_batches(4, 2, steps) == ref);
  CHECK(global_batches(2, 1, steps) == ref);
  CHECK(global_batches(1, 8, steps) == ref);

  // Exact coverage: the first S positions hold every sample once, whatever the layout, and the
  // shares of one step never overlap.
  DataLoader one(counting_dataset(dir), LoaderLayout{T, 4, 2, 0, 1, 7});
  const uint64_t S = one.samples_per_epoch();
  CHECK(S == 1600 / 16 + 998 / 16);
  std::vector<int> count(S, 0);
  for (uint64_t p = 0; p < S; ++p) count[one.sample_at(p)]++;
  CHECK(std::all_of(count.begin(), count.end(), [](int c) { return c == 1; }));
  for (int dp : {2, 4}) {
    std::set<uint64_t> seen;
    for (int r = 0; r < dp; ++r)
      for (int i = 0; i < GB / dp; ++i) seen.insert(one.sample_at(uint64_t(r) * (GB / dp) + i));
    CHECK(seen.size() == size_t(GB));
  }
}

TEST_CASE("a loader resumed from its state continues with exactly the following batches") {
  auto dir = fresh_dir("resume");
  LoaderLayout layout{16, 2, 2, 1, 2, 99};
  DataLoader a(counting_dataset(dir), layout);
  std::vector<StepBatch> seq;
  for (int s = 0; s < 30; ++s) seq.push_back(a.next());  // crosses an epoch boundary (S = 162, 4 per step per rank)
  DataLoader first(counting_dataset(dir), layout);
  for (int s = 0; s < 17; ++s) first.next();
  LoaderState st = first.state();
  CHECK(st.next_step == 17);
  DataLoader resumed(counting_dataset(dir), layout, 2, st);
  for (int s = 17; s < 30; ++s) CHECK(resumed.next().tokens == seq[size_t(s)].tokens);
}
