#pragma once
// Where a flat gradient buffer is cut into buckets, and which part of each bucket a data-parallel
// rank owns under ZeRO. Pure arithmetic (no MPI): parallel/grad_buckets.hpp executes the plan,
// tests/unit/test_bucket_plan.cpp checks it.
//
// Buckets are contiguous ranges of at most `bucket_elems` elements (a bucket closes at the first
// ready point that makes it full; a segment larger than a bucket is cut) taken from the END of the buffer, because backward finishes gradients from
// the last layer to the first (the model lays parameters out layer-major). `ready_points` are
// the offsets backward will report as "every gradient from here on is final": bucket boundaries
// sit on them, so a bucket never waits for gradients beyond the point that completes it, and the
// last bucket (what backward finishes at the very end, e.g. the embeddings) is no larger than
// it has to be.
//
// Sharded (ZeRO stage >= 1): rank r of dp owns part r of every bucket (even_counts: sizes differ
// by at most one), the Megatron distributed-optimizer layout. Its parts, in bucket order, are
// its `owned` ranges; their gradients arrive packed in that order (a reduce-scatter per bucket).
#include <cstddef>
#include <vector>

#include "parallel/range.hpp"

namespace loom::parallel {

// Buckets of [0, n) in launch order (from the end of the buffer to its start). Throws
// std::invalid_argument if bucket_elems is 0. `split_at_points`: every ready point is also a
// bucket boundary (ZeRO-2/3 reduce and gather unit by unit, and a bucket never spans two units).
std::vector<Range> plan_buckets(size_t n, size_t bucket_elems, std::vector<size_t> ready_points,
                                bool split_at_points = false);

struct BucketPlan {
  std::vector<Range> buckets;               // launch order
  bool sharded = false;                     // ZeRO >= 1: each dp rank owns one part of each bucket
  std::vector<std::vector<size_t>> counts;  // sharded: per bucket, the part size of each dp rank
  std::vector<size_t> shard_offset;         // sharded: per bucket, where this rank's part starts in the packed shard
  std::vector<Range> owned;                 // this rank's ranges in bucket order (all of [0, n) unsharded)
  size_t owned_size = 0;                    // sum of the owned ranges' sizes
};

// The plan for rank `dp_rank` of `dp_size` ranks over a buffer of n elements.
BucketPlan plan_bucket_shards(size_t n, std::vector<Range> buckets, bool sharded, int dp_size, int dp_rank);

// Splits [0, n) into `parts` contiguous ranges whose sizes differ by at most one.
std::vector<size_t> even_counts(size_t n, int parts);

}  // namespace loom::parallel
