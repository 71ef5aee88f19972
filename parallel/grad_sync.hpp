#pragma once
// Data-parallel gradient reduction over a flat gradient buffer, in buckets, overlapped with the
// backward pass; and the ZeRO-1 sharding of the optimizer that goes with it.
//
// Buckets are contiguous ranges of at least `bucket_elems` (at most that, where one readiness
// segment is larger) cut from the END of the buffer, because
// the backward pass finishes gradients from the last layer to the first (the engine lays
// parameters out layer-major). The engine reports progress with grads_ready_from(offset): every
// gradient at or after `offset` is final. Each bucket that this completes is launched at once
// (non-blocking), so its reduction runs while backward computes the layers before it.
//
//  zero = 0: each bucket is all-reduced in place; every rank ends with the full summed gradient.
//  zero = 1: each bucket is reduce-scattered; rank r of dp owns part r of every bucket (the
//            Megatron distributed-optimizer layout), receives the summed gradient of its parts
//            in a compact shard buffer, updates only those parameters, and gather_params()
//            all-gathers the updated parameters bucket by bucket.
#include <chrono>
#include <cstddef>
#include <functional>
#include <utility>
#include <vector>

#include "parallel/communicator.hpp"

namespace loom::parallel {

struct Range {
  size_t begin = 0, end = 0;
  size_t size() const { return end - begin; }
};

class GradSync {
 public:
  // `alloc` provides zeroed memory the communicator can reach (host for MPI, device for NCCL);
  // it is called once, for the ZeRO-1 shard buffer. `ready_points` are the offsets the engine
  // will report to grads_ready_from(): bucket boundaries are placed on them, so that a bucket
  // never waits for gradients beyond the point that completes it, and the last one (whatever
  // backward finishes at the very end) is no larger than it has to be.
  GradSync(Communicator& dp, float* grads, size_t n, size_t bucket_elems, bool zero1,
           const std::function<float*(size_t)>& alloc, std::vector<size_t> ready_points = {});
  ~GradSync();

  void grads_ready_from(size_t offset);
  // Launches what is left, waits for everything; returns the seconds spent waiting here (the
  // communication time that backward did not hide).
  double finish();

  bool zero1() const { return zero1_; }
  // ZeRO-1: this rank's ranges of the flat buffer (bucket order) and their summed gradients,
  // packed in that order. Without ZeRO-1: the whole buffer, and the gradient buffer itself.
  const std::vector<Range>& owned() const { return owned_; }
  float* owned_grads() { return zero1_ ? shard_ : grads_; }
  size_t owned_size() const { return owned_size_; }
  // ZeRO-1: after the optimizer updated the owned ranges of `params`, gives every rank all of it.
  void gather_params(float* params);
  size_t bucket_count() const { return buckets_.size(); }

 private:
  struct Bucket {
    Range range;
    std::vector<size_t> counts;  // ZeRO-1: part sizes per dp rank
    size_t shard_offset = 0;     // ZeRO-1: where this rank's part goes in shard_
    RequestPtr pending;
    bool launched = false;
  };
  void launch(Bucket& b);

  Communicator& dp_;
  float* grads_;
  size_t n_;
  bool zero1_;
  std::vector<Bucket> buckets_;  // in launch order: from the end of the buffer to its start
  size_t next_ = 0;              // next bucket to launch
  std::vector<Range> owned_;
  size_t owned_size_ = 0;
  float* shard_ = nullptr;
};

}  // namespace loom::parallel
