#include "parallel/grad_sync.hpp"

#include <algorithm>
#include <stdexcept>

namespace loom::parallel {

GradSync::GradSync(Communicator& dp, float* grads, size_t n, size_t bucket_elems, bool zero1,
                   const std::function<float*(size_t)>& alloc, std::vector<size_t> ready_points)
    : dp_(dp), grads_(grads), n_(n), zero1_(zero1) {
  if (bucket_elems == 0) throw std::invalid_argument("GradSync: bucket size must be positive");
  // Readiness segments from the end of the buffer down to 0.
  ready_points.push_back(0);
  std::sort(ready_points.rbegin(), ready_points.rend());
  ready_points.erase(std::unique(ready_points.begin(), ready_points.end()), ready_points.end());
  ready_points.erase(std::remove_if(ready_points.begin(), ready_points.end(), [&](size_t p) { return p >= n; }),
                     ready_points.end());
  size_t end = n;  // the open bucket is [point, end)
  auto close = [&](size_t begin) {
    Bucket b;
    b.range = {begin, end};
    buckets_.push_back(std::move(b));
    end = begin;
  };
  for (size_t i = 0; i < ready_points.size(); ++i) {
    const size_t point = ready_points[i];
    while (end - point > bucket_elems) close(end - bucket_elems);  // a segment larger than a bucket
    // Close once big enough; and always before the final segment (the one backward finishes
    // last, e.g. the embeddings), so that what is exposed after backward is only that.
    const bool before_final = i + 2 == ready_points.size();
    if (end > point && (end - point >= bucket_elems || before_final || point == 0)) close(point);
  }
  if (!zero1_) {
    owned_ = {{0, n}};
    owned_size_ = n;
    return;
  }
  const size_t me = size_t(dp_.rank());
  for (Bucket& b : buckets_) {
    b.counts = even_counts(b.range.size(), dp_.size());
    size_t part_begin = b.range.begin;
    for (size_t r = 0; r < me; ++r) part_begin += b.counts[r];
    b.shard_offset = owned_size_;
    if (b.counts[me]) owned_.push_back({part_begin, part_begin + b.counts[me]});
    owned_size_ += b.counts[me];
  }
  shard_ = alloc(std::max<size_t>(owned_size_, 1));
}

GradSync::~GradSync() {
  // Never leave a reduction running into freed memory.
  for (Bucket& b : buckets_)
    if (b.pending) b.pending->wait();
}

void GradSync::launch(Bucket& b) {
  float* base = grads_ + b.range.begin;
  if (zero1_) b.pending = dp_.ireduce_scatter(base, shard_ + b.shard_offset, b.counts);
  else b.pending = dp_.iall_reduce(base, b.range.size(), ReduceOp::Sum);
  b.launched = true;
}

void GradSync::grads_ready_from(size_t offset) {
  while (next_ < buckets_.size() && buckets_[next_].range.begin >= offset) launch(buckets_[next_++]);
}

double GradSync::finish() {
  grads_ready_from(0);
  auto t0 = std::chrono::steady_clock::now();
  for (Bucket& b : buckets_) {
    b.pending->wait();
    b.pending.reset();
    b.launched = false;
  }
  next_ = 0;
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

void GradSync::gather_params(float* params) {
  if (!zero1_) return;
  std::vector<RequestPtr> reqs;
  for (Bucket& b : buckets_) reqs.push_back(dp_.iall_gather(params + b.range.begin, b.counts));
  for (auto& r : reqs) r->wait();
}

}  // namespace loom::parallel
