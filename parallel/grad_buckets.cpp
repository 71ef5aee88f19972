#include "parallel/grad_buckets.hpp"

#include <algorithm>
#include <chrono>
#include <stdexcept>

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

void visit_gathered(Communicator& group, const BucketPlan& plan, size_t n,
                    const std::function<void(Range part, size_t packed, float* dst)>& fetch,
                    const std::function<void(size_t begin, size_t n, const float* data)>& use) {
  if (!plan.sharded) return visit_pieces(n, fetch, use);
  std::vector<float> buf;
  // Buckets are in launch order (backward's: from the end of the buffer down); visited upwards.
  std::vector<size_t> order(plan.buckets.size());
  size_t largest = 0;
  for (size_t i = 0; i < order.size(); ++i) {
    order[i] = i;
    largest = std::max(largest, plan.buckets[i].size());
  }
  std::sort(order.begin(), order.end(), [&](size_t a, size_t b) { return plan.buckets[a].begin < plan.buckets[b].begin; });
  buf.resize(largest);
  const size_t me = size_t(group.rank());
  size_t covered = 0;
  for (size_t i : order) {
    const Range& b = plan.buckets[i];
    if (b.begin != covered) throw std::logic_error("visit_gathered: the plan's buckets do not tile the buffer");
    const std::vector<size_t>& counts = plan.counts[i];
    size_t part = 0;
    for (size_t r = 0; r < me; ++r) part += counts[r];
    if (counts[me]) fetch({b.begin + part, b.begin + part + counts[me]}, plan.shard_offset[i], buf.data() + part);
    group.all_gather(TypedPtr(buf.data()), counts);
    use(b.begin, b.size(), buf.data());
    covered = b.end;
  }
  if (covered != n) throw std::logic_error("visit_gathered: the plan's buckets do not tile the buffer");
}

}  // namespace loom::parallel
