// parallel.bucket_mb: auto's choice (parallel/bucket_sizing.hpp) against hand-computed cases.
//
// The fixture: a 4 MiB fp32 buffer (n = 2^20) whose backward reports a ready point every
// s = n/16 elements (0.25 MiB), backward_s = 1 s, so offset k*s is final at (16 - k)/16 s and the
// last segment [0, s) at 1 s. Link "slow": alpha 10 ms, beta 8 MiB/s, so a 0.25 MiB bucket costs
// 10 + 31.25 = 41.25 ms, a 0.75 MiB one 103.75 ms, 1 MiB 135 ms, 3.75 MiB 478.75 ms.
#include <catch2/catch.hpp>

#include <vector>

#include "parallel/bucket_sizing.hpp"

using namespace loom::parallel;

namespace {

constexpr double kMiB = 1 << 20;

BucketSizing fixture(double alpha_s, double bytes_per_s) {
  BucketSizing in;
  in.n = size_t(1) << 20;
  const size_t s = in.n / 16;
  for (size_t k = 1; k < 16; ++k) in.ready_points.push_back(k * s);
  in.backward_s = 1.0;
  in.link = LinkModel{alpha_s, bytes_per_s};
  return in;
}

}  // namespace

TEST_CASE("the candidate sizes are 0.25, 0.375, 0.5, 0.75, 1, 1.5, ... MiB within the clamps") {
  CHECK(bucket_mb_candidates(0.25, 4) == std::vector<double>{0.25, 0.375, 0.5, 0.75, 1, 1.5, 2, 3, 4});
  CHECK(bucket_mb_candidates(1, 3) == std::vector<double>{1, 1.5, 2, 3});
  CHECK(bucket_mb_to_elems(1) == 262144);
  CHECK(bucket_mb_to_elems(0.375) == 98304);  // every candidate is a whole number of floats
}

TEST_CASE("predict_buckets simulates the plan: ready times, one bucket after another, the tail") {
  const BucketSizing in = fixture(0.010, 8 * kMiB);
  // 0.25 MiB: 16 buckets, each ready 62.5 ms after the previous and reduced in 41.25 ms: the
  // link keeps up, only the last (the final segment, ready at 1 s) is exposed.
  BucketPrediction p = predict_buckets(in, bucket_mb_to_elems(0.25));
  CHECK(p.buckets == 16);
  CHECK(p.reduce_s == Approx(16 * 0.04125));
  CHECK(p.exposed_s == Approx(0.04125));
  // 1 MiB: [12s,16s) ready 0.25 -> 0.385; [8s,12s) 0.5 -> 0.635; [4s,8s) 0.75 -> 0.885; the plan
  // closes before the final segment: [s,4s) (0.75 MiB) ready 0.9375 -> 1.04125; [0,s) -> 1.0825.
  p = predict_buckets(in, bucket_mb_to_elems(1));
  CHECK(p.buckets == 5);
  CHECK(p.reduce_s == Approx(3 * 0.135 + 0.10375 + 0.04125));
  CHECK(p.exposed_s == Approx(0.0825));
  // 4 MiB: [s,n) ready at 0.9375 takes 478.75 ms -> 1.41625; [0,s) -> 1.4575.
  p = predict_buckets(in, bucket_mb_to_elems(4));
  CHECK(p.buckets == 2);
  CHECK(p.reduce_s == Approx(0.47875 + 0.04125));
  CHECK(p.exposed_s == Approx(0.4575));
}

TEST_CASE("slow link, long backward: small buckets (the largest within 5% of the reduction of the best)") {
  // Best: 41.25 ms at 0.25 MiB (16 x 41.25 = 660 ms of reduction); 0.375 and 0.5 MiB expose the
  // same (the final segment alone: 0.5 MiB = 9 buckets, 7 x 72.5 + 2 x 41.25 = 590 ms); limit
  // 41.25 + 0.05 x 660 = 74.25 ms; 0.75 and 1 MiB predict 82.5 ms, 1.5 MiB 92.5 ms ([10s,16s)
  // 0.375 -> 0.5725; [4s,10s) 0.75 -> 0.9475; [s,4s) -> 1.05125; [0,s) -> 1.0925).
  const BucketSizing in = fixture(0.010, 8 * kMiB);
  CHECK(predict_buckets(in, bucket_mb_to_elems(0.5)).exposed_s == Approx(0.04125));
  CHECK(predict_buckets(in, bucket_mb_to_elems(0.5)).reduce_s == Approx(0.59));
  CHECK(predict_buckets(in, bucket_mb_to_elems(0.75)).exposed_s == Approx(0.0825));
  CHECK(predict_buckets(in, bucket_mb_to_elems(1.5)).exposed_s == Approx(0.0925));
  const BucketPrediction c = choose_bucket_size(in);
  CHECK(c.bucket_mb == 0.5);
  CHECK(c.buckets == 9);
  // A short backward leaves the link behind (0.25 s of backward, >= 0.52 s of reduction): the wire
  // runs from the first bucket to the end, so fewer buckets (less alpha) win, near
  // G * sqrt(alpha / B) = 4 MiB * 0.2 = 0.8 MiB. 1.5 MiB: [10s,16s) ready 0.09375 -> 0.29125;
  // [4s,10s) -> 0.48875; [s,4s) -> 0.5925; [0,s) -> 0.63375: 383.75 ms exposed. The best is
  // 0.75 MiB (356.875 ms, 560 ms of reduction): limit 384.875 ms; 2 MiB predicts 405 ms.
  BucketSizing shorter = in;
  shorter.backward_s = 0.25;
  const BucketPrediction s = choose_bucket_size(shorter);
  CHECK(s.bucket_mb == 1.5);
  CHECK(s.exposed_s == Approx(0.38375));
  CHECK(predict_buckets(shorter, bucket_mb_to_elems(0.75)).exposed_s == Approx(0.356875));
}

TEST_CASE("fast link: one big bucket (the first candidate that holds the whole buffer)") {
  // alpha 50 us, 10 GiB/s: every size exposes the final segment's 74 us; the largest wins.
  const BucketPrediction c = choose_bucket_size(fixture(50e-6, 10 * 1024 * kMiB));
  CHECK(c.bucket_mb == 4.0);
  CHECK(c.buckets == 2);  // the whole buffer but the final segment, then the final segment
  CHECK(c.exposed_s == Approx(50e-6 + 0.25 * kMiB / (10 * 1024 * kMiB)));
}

TEST_CASE("the clamps bound the choice") {
  BucketSizing fast = fixture(50e-6, 10 * 1024 * kMiB);
  fast.max_mb = 2;
  CHECK(choose_bucket_size(fast).bucket_mb == 2.0);
  BucketSizing slow = fixture(0.010, 8 * kMiB);
  slow.min_mb = 3;  // 3 MiB predicts 280 ms (530 ms of reduction), 4 MiB 457.5 ms (> 280 + 26.5)
  CHECK(choose_bucket_size(slow).bucket_mb == 3.0);
  slow.min_mb = 1.5;  // best 92.5 ms (1.5 MiB, 540 ms of reduction); 2 MiB predicts 207.5 ms
  CHECK(choose_bucket_size(slow).bucket_mb == 1.5);
}

TEST_CASE("fit_link recovers alpha and beta, and clamps a negative intercept to 0") {
  const LinkModel m = fit_link({{65536, 0.001 + 65536 / 1e8}, {524288, 0.001 + 524288 / 1e8}, {4194304, 0.001 + 4194304 / 1e8}});
  CHECK(m.alpha_s == Approx(0.001).epsilon(1e-9));
  CHECK(m.bytes_per_s == Approx(1e8).epsilon(1e-9));
  const LinkModel z = fit_link({{1000, 0.0}, {2000, 0.002}});  // intercept -0.002 -> through the origin
  CHECK(z.alpha_s == 0);
  CHECK(z.bytes_per_s == Approx((1000.0 * 1000 + 2000.0 * 2000) / (2000 * 0.002)));  // sum x^2 / sum xy
  CHECK(fit_link({{1000, 0.01}, {2000, 0.005}}).bytes_per_s == 1e15);  // slower when smaller: no bandwidth term
}
