#include "parallel/bucket_plan.hpp"

#include <algorithm>
#include <stdexcept>

namespace loom::parallel {

std::vector<size_t> even_counts(size_t n, int parts) {
  std::vector<size_t> c(size_t(parts), n / size_t(parts));
  for (size_t i = 0; i < n % size_t(parts); ++i) c[i]++;
  return c;
}

std::vector<Range> plan_buckets(size_t n, size_t bucket_elems, std::vector<size_t> ready_points, bool split_at_points) {
  if (bucket_elems == 0) throw std::invalid_argument("plan_buckets: bucket size must be positive");
  // Readiness segments from the end of the buffer down to 0.
  ready_points.push_back(0);
  std::sort(ready_points.rbegin(), ready_points.rend());
  ready_points.erase(std::unique(ready_points.begin(), ready_points.end()), ready_points.end());
  ready_points.erase(std::remove_if(ready_points.begin(), ready_points.end(), [&](size_t p) { return p >= n; }),
                     ready_points.end());
  std::vector<Range> buckets;
  size_t end = n;  // the open bucket is [point, end)
  auto close = [&](size_t begin) {
    buckets.push_back({begin, end});
    end = begin;
  };
  for (size_t i = 0; i < ready_points.size(); ++i) {
    const size_t point = ready_points[i];
    while (end - point > bucket_elems) close(end - bucket_elems);  // a segment larger than a bucket
    // Close once big enough; and always before the final segment (the one backward finishes
    // last, e.g. the embeddings), so that what is exposed after backward is only that.
    const bool before_final = i + 2 == ready_points.size();
    if (end > point && (end - point >= bucket_elems || before_final || point == 0 || split_at_points)) close(point);
  }
  return buckets;
}

BucketPlan plan_bucket_shards(size_t n, std::vector<Range> buckets, bool sharded, int dp_size, int dp_rank) {
  BucketPlan p;
  p.buckets = std::move(buckets);
  p.sharded = sharded;
  if (!sharded) {
    p.owned = {{0, n}};
    p.owned_size = n;
    return p;
  }
  const size_t me = size_t(dp_rank);
  for (const Range& b : p.buckets) {
    std::vector<size_t> counts = even_counts(b.size(), dp_size);
    size_t part_begin = b.begin;
    for (size_t r = 0; r < me; ++r) part_begin += counts[r];
    p.shard_offset.push_back(p.owned_size);
    if (counts[me]) p.owned.push_back({part_begin, part_begin + counts[me]});
    p.owned_size += counts[me];
    p.counts.push_back(std::move(counts));
  }
  return p;
}

}  // namespace loom::parallel
