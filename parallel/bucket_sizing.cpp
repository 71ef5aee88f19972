#include "parallel/bucket_sizing.hpp"

#include <algorithm>
#include <cmath>

#include "parallel/bucket_plan.hpp"

namespace loom::parallel {

LinkModel fit_link(const std::vector<std::pair<double, double>>& samples) {
  const double k = double(samples.size());
  double sx = 0, sy = 0, sxx = 0, sxy = 0;
  for (const auto& [x, y] : samples) {
    sx += x;
    sy += y;
    sxx += x * x;
    sxy += x * y;
  }
  const double det = k * sxx - sx * sx;
  double slope = det > 0 ? (k * sxy - sx * sy) / det : 0;
  double alpha = det > 0 ? (sy - slope * sx) / k : 0;
  if (alpha < 0) {  // through the origin
    alpha = 0;
    slope = sxx > 0 ? sxy / sxx : 0;
  }
  LinkModel m;
  m.alpha_s = alpha;
  m.bytes_per_s = slope > 0 ? 1.0 / slope : 1e15;
  return m;
}

size_t bucket_mb_to_elems(double mb) { return std::max<size_t>(1, size_t(mb * double(1 << 20) / sizeof(float))); }

std::vector<double> bucket_mb_candidates(double lo, double hi) {
  std::vector<double> c;
  for (double p = 0.25; p <= hi * 1.0000001; p *= 2)
    for (double x : {p, 1.5 * p})
      if (x >= lo * 0.9999999 && x <= hi * 1.0000001) c.push_back(x);
  return c;
}

BucketPrediction predict_buckets(const BucketSizing& in, size_t bucket_elems) {
  BucketPrediction p;
  p.bucket_elems = bucket_elems;
  p.bucket_mb = double(bucket_elems) * sizeof(float) / double(1 << 20);
  if (in.n == 0) return p;
  const std::vector<Range> plan = plan_buckets(in.n, bucket_elems, in.ready_points, in.split_at_points);
  std::vector<size_t> points = in.ready_points;
  points.push_back(0);
  std::sort(points.begin(), points.end());
  const double B = in.backward_s, n = double(in.n);
  double finish = 0;
  for (const Range& b : plan) {
    // Launched when backward reports the largest ready point at or below the bucket's start.
    const size_t point = *(std::upper_bound(points.begin(), points.end(), b.begin) - 1);
    const double ready = point == 0 ? B : B * (n - double(point)) / n;
    const double cost = in.link.seconds(double(b.size() * in.wire_bytes));
    finish = std::max(finish, ready) + cost;
    p.reduce_s += cost;
  }
  p.buckets = plan.size();
  p.exposed_s = std::max(0.0, finish - B);
  return p;
}

BucketPrediction choose_bucket_size(const BucketSizing& in) {
  std::vector<BucketPrediction> preds;
  for (double mb : bucket_mb_candidates(in.min_mb, in.max_mb)) {
    preds.push_back(predict_buckets(in, bucket_mb_to_elems(mb)));
    if (preds.back().bucket_elems >= in.n) break;  // one bucket: larger sizes make the same plan
  }
  if (preds.empty()) return predict_buckets(in, bucket_mb_to_elems(in.max_mb));
  const BucketPrediction* best = &preds.front();
  for (const BucketPrediction& p : preds)
    if (p.exposed_s < best->exposed_s) best = &p;
  const double limit = best->exposed_s + in.slack * best->reduce_s;
  for (auto it = preds.rbegin(); it != preds.rend(); ++it)
    if (it->exposed_s <= limit) return *it;
  return preds.front();
}

}  // namespace loom::parallel
