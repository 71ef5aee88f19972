#pragma once
// Executes a BucketPlan (parallel/bucket_plan.hpp) over the data-parallel group: the flat
// gradient buffer is reduced bucket by bucket while backward is still running, and, when the
// plan is sharded (ZeRO), a buffer of the same layout (the updated parameters, an optimizer
// moment) is all-gathered from each rank's parts.
//
// The engine reports backward's progress with grads_ready_from(offset): every gradient at or
// after `offset` is final. Each bucket this completes is launched at once (non-blocking), so its
// reduction runs while backward computes the layers before it.
//   unsharded: each bucket is all-reduced in place; every rank ends with the full summed gradient.
//   sharded:   each bucket is reduce-scattered; this rank receives the summed gradient of its
//              part of every bucket, packed in bucket order in a shard buffer of its own.
#include <cstddef>
#include <functional>
#include <vector>

#include "parallel/bucket_plan.hpp"
#include "parallel/communicator.hpp"

namespace loom::parallel {

class GradBuckets {
 public:
  // `grads` is the flat gradient buffer (plan.buckets cover it). `alloc` provides zeroed memory
  // the communicator can reach (host for MPI, device for NCCL); it is called once, for the shard
  // buffer of a sharded plan.
  GradBuckets(Communicator& dp, float* grads, BucketPlan plan, const std::function<float*(size_t)>& alloc);
  ~GradBuckets();  // waits for any reduction in flight
  GradBuckets(const GradBuckets&) = delete;
  GradBuckets& operator=(const GradBuckets&) = delete;

  void grads_ready_from(size_t offset);
  // Launches what is left and waits for every bucket; returns the seconds spent waiting here (the
  // communication that backward did not hide).
  double finish();

  const BucketPlan& plan() const { return plan_; }
  // The summed gradients of this rank's owned ranges, packed in their order (the gradient buffer
  // itself when unsharded). Valid after finish().
  float* owned_grads() { return plan_.sharded ? shard_ : grads_; }
  // Sharded: each rank holds its parts of `buf` (a buffer of the gradient's layout) up to date;
  // afterwards every rank holds all of it. Unsharded: nothing to do.
  void all_gather_parts(float* buf);

 private:
  void launch(size_t bucket);

  Communicator& dp_;
  float* grads_;
  BucketPlan plan_;
  std::vector<RequestPtr> pending_;  // per bucket
  size_t next_ = 0;                  // next bucket to launch
  float* shard_ = nullptr;
};

// Sharded plan: each rank of `group` holds its parts of `buf` (a buffer of the plan's layout, in
// memory `group` can reach); afterwards every rank holds all of it. Unsharded: nothing to do.
// Collective over `group`, which must be the plan's dp group (or one of the same shape: the
// host-memory twin of a device communicator).
void all_gather_parts(Communicator& group, const BucketPlan& plan, float* buf);

}  // namespace loom::parallel
