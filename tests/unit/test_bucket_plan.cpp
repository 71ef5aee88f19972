// Gradient bucket layout and ZeRO ownership ranges (parallel/bucket_plan.hpp): pure arithmetic,
// checked for every bucket size and data-parallel degree small enough to enumerate.
#include <catch2/catch.hpp>

#include <algorithm>
#include <vector>

#include "parallel/bucket_plan.hpp"

using loom::parallel::BucketPlan;
using loom::parallel::Range;
using loom::parallel::plan_bucket_shards;
using loom::parallel::plan_buckets;

namespace {

// A layer-major model's ready points: the head at `head`, then every `layer` elements down to
// `embed`, then 0 (what Gpt::grad_ready_points reports).
std::vector<size_t> ready_points(size_t head, size_t embed, size_t layer) {
  std::vector<size_t> pts{head};
  for (size_t p = head; p > embed; p -= layer) pts.push_back(p - layer);
  pts.push_back(0);
  return pts;
}

}  // namespace

TEST_CASE("a worked example: buckets close on ready points, cut from the end") {
  const std::vector<Range> b = plan_buckets(100, 30, {90, 60, 20, 0});
  const std::vector<Range> want{{70, 100}, {40, 70}, {20, 40}, {0, 20}};
  REQUIRE(b == want);
}

TEST_CASE("buckets tile the buffer from its end, never larger than the bucket size") {
  for (size_t n : {1ul, 7ul, 100ul, 1000ul})
    for (size_t bucket : {1ul, 3ul, 16ul, 64ul, 5000ul}) {
      CAPTURE(n, bucket);
      const std::vector<size_t> pts = n >= 100 ? ready_points(n - 10, 20, 10) : std::vector<size_t>{0};
      const std::vector<Range> b = plan_buckets(n, bucket, pts);
      REQUIRE(!b.empty());
      REQUIRE(b.front().end == n);
      REQUIRE(b.back().begin == 0);
      for (size_t i = 0; i < b.size(); ++i) {
        REQUIRE(b[i].size() > 0);
        REQUIRE(b[i].size() <= bucket);
        if (i + 1 < b.size()) REQUIRE(b[i + 1].end == b[i].begin);  // contiguous, launch order = descending
        // A bucket starts on a ready point unless it is a full-size cut of a larger segment.
        const bool on_point = std::find(pts.begin(), pts.end(), b[i].begin) != pts.end();
        REQUIRE((on_point || b[i].size() == bucket));
      }
      // What backward finishes last (below the smallest non-zero ready point, the embeddings) is
      // a bucket of its own: nothing larger waits for it.
      size_t smallest = n;
      for (size_t p : pts)
        if (p > 0) smallest = std::min(smallest, p);
      if (smallest < n && smallest <= bucket) REQUIRE(b.back().end == smallest);
    }
}

TEST_CASE("a zero bucket size is an error") { REQUIRE_THROWS_AS(plan_buckets(10, 0, {}), std::invalid_argument); }

TEST_CASE("ZeRO ownership: every element owned by exactly one dp rank, parts differ by at most one") {
  const size_t n = 997;  // prime: uneven parts everywhere
  for (size_t bucket : {1ul, 10ul, 97ul, 2000ul})
    for (int dp = 1; dp <= 8; ++dp) {
      CAPTURE(bucket, dp);
      const std::vector<Range> buckets = plan_buckets(n, bucket, ready_points(n - 7, 40, 50));
      std::vector<int> owners(n, 0);
      for (int r = 0; r < dp; ++r) {
        const BucketPlan p = plan_bucket_shards(n, buckets, true, dp, r);
        REQUIRE(p.sharded);
        REQUIRE(p.buckets == buckets);
        REQUIRE(p.counts.size() == buckets.size());
        REQUIRE(p.shard_offset.size() == buckets.size());
        size_t packed = 0, owned_total = 0;
        for (size_t i = 0; i < buckets.size(); ++i) {
          const std::vector<size_t>& c = p.counts[i];
          REQUIRE(c.size() == size_t(dp));
          size_t sum = 0;
          for (size_t x : c) sum += x;
          REQUIRE(sum == buckets[i].size());
          const auto [lo, hi] = std::minmax_element(c.begin(), c.end());
          REQUIRE(*hi - *lo <= 1);
          REQUIRE(p.shard_offset[i] == packed);  // this rank's parts packed in bucket order
          packed += c[size_t(r)];
        }
        for (const Range& o : p.owned) {
          REQUIRE(o.size() > 0);
          owned_total += o.size();
          for (size_t e = o.begin; e < o.end; ++e) owners[e]++;
        }
        REQUIRE(owned_total == p.owned_size);
        REQUIRE(packed == p.owned_size);
      }
      REQUIRE(std::all_of(owners.begin(), owners.end(), [](int k) { return k == 1; }));
    }
}

TEST_CASE("rank r owns part r of each bucket") {
  const std::vector<Range> buckets = plan_buckets(10, 10, {});
  const BucketPlan p = plan_bucket_shards(10, buckets, true, 3, 1);  // parts 4, 3, 3
  REQUIRE(p.owned == std::vector<Range>{{4, 7}});
  REQUIRE(p.owned_size == 3);
}

TEST_CASE("without ZeRO every rank owns the whole buffer") {
  const std::vector<Range> buckets = plan_buckets(500, 64, ready_points(490, 40, 50));
  for (int r = 0; r < 4; ++r) {
    const BucketPlan p = plan_bucket_shards(500, buckets, false, 4, r);
    REQUIRE(!p.sharded);
    REQUIRE(p.owned == std::vector<Range>{{0, 500}});
    REQUIRE(p.owned_size == 500);
  }
}
