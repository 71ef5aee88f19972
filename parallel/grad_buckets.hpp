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
// The buckets reduce in the gradient buffer's dtype (fp32, bf16 or fp16): a bf16 staging buffer
// is summed in bf16 (see communicator.hpp for where that rounds), and its shard buffer is bf16.
#include <cstddef>
#include <functional>
#include <vector>

#include "parallel/bucket_plan.hpp"
#include "parallel/communicator.hpp"

namespace loom::parallel {

class GradBuckets {
 public:
  // `grads` is the flat gradient buffer (plan.buckets cover it). `alloc(dtype, n)` provides n
  // zeroed elements the communicator can reach (host for MPI, device for NCCL); it is called
  // once, for the shard buffer of a sharded plan, with the gradient buffer's dtype.
  GradBuckets(Communicator& dp, TypedPtr grads, BucketPlan plan, const std::function<TypedPtr(DType, size_t)>& alloc);
  // fp32 gradients; `alloc(n)` gives n zeroed floats.
  GradBuckets(Communicator& dp, float* grads, BucketPlan plan, const std::function<float*(size_t)>& alloc);
  ~GradBuckets();  // waits for any reduction in flight
  GradBuckets(const GradBuckets&) = delete;
  GradBuckets& operator=(const GradBuckets&) = delete;

  void grads_ready_from(size_t offset);
  // Launches what is left and waits for every bucket; returns the seconds spent waiting here (the
  // communication that backward did not hide).
  double finish();
  // The seconds the last finish()'s bucket reductions themselves ran, summed over the buckets
  // (they run one after another on the communicator's worker), or < 0 where the communicator
  // does not time them (Request::run_seconds). With finish()'s wait: the fraction of the
  // reduction backward hid is 1 - wait / reduce_seconds.
  double reduce_seconds() const { return reduce_s_; }

  const BucketPlan& plan() const { return plan_; }
  // The summed gradients of this rank's owned ranges, packed in their order (the gradient buffer
  // itself when unsharded). Valid after finish().
  TypedPtr owned_grads_typed() { return plan_.sharded ? shard_ : grads_; }
  // The same, for fp32 gradients (throws std::logic_error for another dtype).
  float* owned_grads() { return owned_grads_typed().as<float>(); }
  // Sharded: each rank holds its parts of `buf` (a buffer of the gradient's layout, any dtype
  // all_gather moves) up to date; afterwards every rank holds all of it. Unsharded: nothing to do.
  void all_gather_parts(TypedPtr buf);

 private:
  void launch(size_t bucket);

  Communicator& dp_;
  TypedPtr grads_;
  BucketPlan plan_;
  std::vector<RequestPtr> pending_;  // per bucket
  size_t next_ = 0;                  // next bucket to launch
  double reduce_s_ = -1;             // see reduce_seconds()
  TypedPtr shard_;
};

// Sharded plan: each rank of `group` holds its parts of `buf` (a buffer of the plan's layout, in
// memory `group` can reach); afterwards every rank holds all of it. Unsharded: nothing to do.
// Collective over `group`, which must be the plan's dp group (or one of the same shape: the
// host-memory twin of a device communicator). `buf` may be of any dtype all_gather moves.
void all_gather_parts(Communicator& group, const BucketPlan& plan, TypedPtr buf);

// Reads the whole of an fp32 buffer of the plan's layout [0, n) that the ranks of `group` hold in
// parts (sharded), or each whole (unsharded), a piece at a time in ascending order, so that no
// rank holds more than a bucket of it at once (a checkpoint's snapshot needs every element, but
// keeps only the slices this rank writes). `fetch(part, packed, dst)`: copy this rank's part
// (elements [part.begin, part.end) of the buffer, at `packed` in its packed owned store) to host
// `dst`. `use(begin, n, data)`: elements [begin, begin + n), complete, in host memory until the
// call returns. Sharded: a bucket at a time, gathered over `group` (host memory: an MPI
// communicator), collective; unsharded: pieces of at most kVisitPieceElems, local.
constexpr size_t kVisitPieceElems = size_t(4) << 20;  // 16 MB of fp32
// The unsharded case alone, local: [0, n) in pieces of at most kVisitPieceElems. (Inline: the
// model reads its own flat parameters so, without linking the communicators.)
inline void visit_pieces(size_t n, const std::function<void(Range part, size_t packed, float* dst)>& fetch,
                         const std::function<void(size_t begin, size_t n, const float* data)>& use) {
  std::vector<float> buf(n < kVisitPieceElems ? n : kVisitPieceElems);
  for (size_t b = 0; b < n; b += kVisitPieceElems) {
    const size_t e = n - b < kVisitPieceElems ? n : b + kVisitPieceElems;
    fetch({b, e}, b, buf.data());
    use(b, e - b, buf.data());
  }
}
void visit_gathered(Communicator& group, const BucketPlan& plan, size_t n,
                    const std::function<void(Range part, size_t packed, float* dst)>& fetch,
                    const std::function<void(size_t begin, size_t n, const float* data)>& use);

}  // namespace loom::parallel
