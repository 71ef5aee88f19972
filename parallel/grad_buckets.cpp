#include "parallel/grad_buckets.hpp"

#include <algorithm>
#include <chrono>

namespace loom::parallel {

GradBuckets::GradBuckets(Communicator& dp, TypedPtr grads, BucketPlan plan,
                         const std::function<TypedPtr(DType, size_t)>& alloc)
    : dp_(dp), grads_(grads), plan_(std::move(plan)), pending_(plan_.buckets.size()) {
  check_reduce_dtype(grads.dtype, "GradBuckets");
  if (plan_.sharded) {
    shard_ = alloc(grads.dtype, std::max<size_t>(plan_.owned_size, 1));
    if (shard_.dtype != grads.dtype) dtype_mismatch(shard_.dtype, grads.dtype);
  }
}

GradBuckets::GradBuckets(Communicator& dp, float* grads, BucketPlan plan, const std::function<float*(size_t)>& alloc)
    : GradBuckets(dp, TypedPtr(grads), std::move(plan), [&alloc](DType, size_t n) { return TypedPtr(alloc(n)); }) {}

GradBuckets::~GradBuckets() {
  // Never leave a reduction running into freed memory.
  for (RequestPtr& r : pending_)
    if (r) r->wait();
}

void GradBuckets::launch(size_t i) {
  const Range& b = plan_.buckets[i];
  const TypedPtr base = grads_ + b.begin;
  if (plan_.sharded)
    pending_[i] = dp_.ireduce_scatter(base, shard_ + plan_.shard_offset[i], plan_.counts[i]);
  else
    pending_[i] = dp_.iall_reduce(base, b.size(), ReduceOp::Sum);
}

void GradBuckets::grads_ready_from(size_t offset) {
  while (next_ < plan_.buckets.size() && plan_.buckets[next_].begin >= offset) launch(next_++);
}

double GradBuckets::finish() {
  grads_ready_from(0);
  auto t0 = std::chrono::steady_clock::now();
  reduce_s_ = 0;
  for (RequestPtr& r : pending_) {
    r->wait();
    const double ran = r->run_seconds();
    reduce_s_ = reduce_s_ < 0 || ran < 0 ? -1 : reduce_s_ + ran;
    r.reset();
  }
  next_ = 0;
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

void GradBuckets::all_gather_parts(TypedPtr buf) { parallel::all_gather_parts(dp_, plan_, buf); }

void all_gather_parts(Communicator& group, const BucketPlan& plan, TypedPtr buf) {
  if (!plan.sharded) return;
  std::vector<RequestPtr> reqs;
  for (size_t i = 0; i < plan.buckets.size(); ++i)
    reqs.push_back(group.iall_gather(buf + plan.buckets[i].begin, plan.counts[i]));
  for (auto& r : reqs) r->wait();
}

}  // namespace loom::parallel
