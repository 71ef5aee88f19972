#pragma once
// parallel.bucket_mb: auto — the gradient bucket size chosen from the data-parallel link and
// the backward time. Pure arithmetic (no MPI): parallel/link_probe.hpp measures the link,
// tests/unit/test_bucket_sizing.cpp checks the choice against hand-computed cases.
//
// The model (docs/parallelism.md "Bucket size"):
//   - one bucket of b bytes costs  alpha + b / beta  on the wire (alpha: per-call latency,
//     beta: the collective's payload bandwidth, both fitted from timed collectives on the dp
//     group), and the buckets run one after another (one communicator worker);
//   - backward makes gradients final from the end of the buffer to its start at an even rate
//     over `backward_s` (offset p is final at backward_s * (n - p) / n); a bucket starts when
//     backward has reported the ready point at or below its start (plan_buckets' rule), the
//     last segment (offset 0: the embeddings) only when backward ends;
//   - simulated over the plan plan_buckets makes for a size: finish_i = max(ready_i,
//     finish_{i-1}) + alpha + bytes_i / beta; exposed = max(0, finish_last - backward_s) (the
//     reduction left after backward: at best the last bucket's, the tail), reduction =
//     sum(alpha + bytes_i / beta).
// Small buckets shorten the tail and start the wire earlier but pay alpha per bucket; large ones
// pay the tail. Candidates are 0.25, 0.375, 0.5, 0.75, 1, 1.5, ... MiB (of fp32 gradients, as
// parallel.bucket_mb counts), from min_mb up to max_mb or the first that holds the whole buffer
// in one bucket. Overheads the model leaves out (each call's CPU time competing with backward,
// the worker's wake-ups, calls too small for the link's window) all favour fewer buckets, so the
// choice is the LARGEST candidate whose predicted exposure is within `slack` x (the best
// candidate's predicted reduction time) of the best: a few percent of the reduction given up for
// fewer calls. A fast link keeps big buckets, a slow link with a long backward gets small ones.
#include <cstddef>
#include <utility>
#include <vector>

namespace loom::parallel {

// One collective of b bytes over the group takes alpha_s + b / bytes_per_s.
struct LinkModel {
  double alpha_s = 0;
  double bytes_per_s = 0;
  double seconds(double bytes) const { return alpha_s + bytes / bytes_per_s; }
};

// Least-squares fit of (bytes, seconds) samples (at least two distinct sizes); a negative
// intercept is clamped to 0 (the slope refitted through the origin), a non-positive slope gives
// an effectively infinite bandwidth (1e15 B/s).
LinkModel fit_link(const std::vector<std::pair<double, double>>& samples);

struct BucketSizing {
  size_t n = 0;                      // gradient elements (the flat buffer)
  size_t wire_bytes = 4;             // bytes per element on the wire (2 for bf16 reduction)
  std::vector<size_t> ready_points;  // as plan_buckets takes them
  bool split_at_points = false;      // as plan_buckets takes it
  double backward_s = 0;             // the backward that the buckets overlap (the last micro-batch's)
  LinkModel link;
  double min_mb = 0.25, max_mb = 64;  // clamps, in MiB of fp32 gradients
  double slack = 0.05;                // of the best's reduce_s: how much more a larger bucket may expose
};

struct BucketPrediction {
  double bucket_mb = 0;   // MiB of fp32 gradients (parallel.bucket_mb's unit)
  size_t bucket_elems = 0;
  size_t buckets = 0;     // how many plan_buckets makes
  double reduce_s = 0;    // predicted sum of the buckets' reductions
  double exposed_s = 0;   // predicted reduction left after backward ends
};

// The model's prediction for one bucket size (in elements).
BucketPrediction predict_buckets(const BucketSizing& in, size_t bucket_elems);
// The choice (see above). Deterministic: the same inputs give the same bits on every rank.
BucketPrediction choose_bucket_size(const BucketSizing& in);
// The candidate sizes in MiB, ascending: 0.25, 0.375, 0.5, 0.75, 1, 1.5, 2, 3, ... within [lo, hi].
std::vector<double> bucket_mb_candidates(double lo, double hi);
// parallel.bucket_mb (MiB of fp32 gradients) as elements; at least 1.
size_t bucket_mb_to_elems(double mb);

}  // namespace loom::parallel
