#pragma once
// The distributed optimizer (Megatron-core's word): everything that happens to one rank's
// gradients after the last micro-batch's backward and to its parameters before the next
// forward. It owns
//   - which elements of the flat buffers this rank updates (the ZeRO stage: all of them at
//     zero 0; one part of every gradient bucket per data-parallel rank at zero 1, 2 and 3),
//   - the bucketed gradient reduction over dp, overlapped with backward (parallel/grad_buckets),
//     in fp32 or (parallel.grad_reduce_dtype: bf16) through a bf16 copy of the gradients that
//     halves the bytes on the wire, and the sum of tied gradients over the embedding group (the
//     first and last pipeline stages' copies of wte),
//   - the global gradient norm and clipping,
//   - the AdamW update of the owned elements (on the device, or on the host with optim.offload)
//     and the all-gather that gives every dp rank the updated parameters (zero 1, 2),
//   - the optimizer state, which the checkpointer asks only this object for.
// It sees the model only as flat buffers, their ParamTable (weight decay, tp replication, tied
// copies) and its units; it knows no layer.
//
// ZeRO-2 and ZeRO-3 (parallel.zero 2, 3): the gradients (and at 3 the parameters) are this
// rank's shard only, held by a ShardedState (sharded_state.hpp) that the model reaches unit by
// unit through its UnitStorage; unit_storage() hands it to Gpt::set_storage.
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "engine/model/param_table.hpp"
#include "engine/optim/adamw.hpp"
#include "engine/optim/offload_adamw.hpp"
#include "engine/optim/sharded_state.hpp"
#include "kernels/backend.hpp"
#include "parallel/bucket_sizing.hpp"
#include "parallel/grad_buckets.hpp"
#include "parallel/link_probe.hpp"
#include "parallel/process_groups.hpp"

namespace loom {

// What the optimizer is handed of the model.
struct ModelBuffers {
  float* params = nullptr;            // flat, backend memory (null at ZeRO-3)
  float* grads = nullptr;             // flat, the same layout (null at ZeRO-2 and 3)
  const ParamTable* table = nullptr;  // names the views into both
  std::vector<size_t> ready_points;   // the offsets backward reports (Gpt::grad_ready_points)
  std::vector<ParamUnit> units;       // Gpt::units(): what ZeRO-2/3 reduce and gather by
  DType compute = DType::f32;         // the model's compute dtype (ZeRO-3 gathers in it)
};

struct DistOptimConfig {
  int zero = 0;             // parallel.zero: 0 replicated; 1 optimizer state, 2 + gradients, 3 + parameters sharded over dp
  bool prefetch = true;     // parallel.prefetch (ZeRO-3)
  bool offload = false;     // optim.offload: cpu (offload_adamw.hpp)
  size_t bucket_elems = 1;  // parallel.bucket_mb, in floats
  AdamWHyper adamw;         // optim.beta1/beta2/eps/weight_decay
  double grad_clip = 0;     // optim.grad_clip (0: no clipping)
  DType reduce_dtype = DType::f32;  // parallel.grad_reduce_dtype: fp32 or bf16
};

class DistributedOptimizer {
 public:
  // Allocates the shard buffer (zero 1) and the moments: may throw std::bad_alloc.
  DistributedOptimizer(Backend& backend, ModelBuffers model, parallel::ProcessGroups& groups, DistOptimConfig config);
  ~DistributedOptimizer();
  DistributedOptimizer(const DistributedOptimizer&) = delete;
  DistributedOptimizer& operator=(const DistributedOptimizer&) = delete;

  // What the model does not hold (ZeRO-2 and 3; null below): attach with Gpt::set_storage.
  UnitStorage* unit_storage() { return sharded_.get(); }
  const ShardedState* sharded() const { return sharded_.get(); }
  // Before each step's first forward.
  void begin_step();
  // Backward's progress (the model's grads_ready_from hook, last micro-batch only): launches the
  // reduction of every bucket this completes. Tied gradients wait for reduce_grads().
  void grads_ready_from(size_t offset);
  // After the last micro-batch's backward: sums the tied gradients over the embedding group,
  // launches the buckets left and waits for all. Returns the seconds spent waiting (the
  // communication backward did not hide).
  double reduce_grads();
  // The L2 norm of the whole reduced gradient, each element counted once (dp shards, tp
  // replicas, pipeline stages, tied copies); the same bits on every rank. After reduce_grads().
  double grad_norm();
  // The gradient noise scale's small batch (engine/optim/noise_scale.hpp). With measure_local(),
  // the squared norm of a gradient of this rank's before the data-parallel reduction (each
  // element of the replica counted once over tp and pp as grad_norm counts them); local_sq()
  // after reduce_grads().
  //  - zero 0/1: the rank's whole gradient (after the tied copies' sum), taken range by range as
  //    backward hands the ranges over, before their buckets are launched;
  //  - ZeRO-2/3, which reduce every micro-batch's gradients as they come (the rank's whole
  //    gradient never exists): its first micro-batch's, unit by unit before the unit's first
  //    reduce-scatter (local_is_first_micro()). Not with pipeline stages (can_measure_local()).
  bool can_measure_local() const;
  bool local_is_first_micro() const { return sharded_ != nullptr; }
  void measure_local(bool on);
  double local_sq() const;
  // That count over flat elements [begin, end) of the gradient buffer as it is now (zero 0/1).
  double counted_sum_squares(size_t begin, size_t end);
  // Clips to optim.grad_clip given the norm, applies AdamW to the owned elements with learning
  // rate `lr` and gives every dp rank the updated parameters. Counts the update: AdamW's bias
  // correction takes t = updates(), so a skipped step (non-finite gradients, fp16's overflow)
  // does not count, as in PyTorch and Megatron, whose optimizer.step() it never reaches.
  // `grad_scale`: the factor the gradients carry (fp16's loss scale; grad_norm is already divided
  // by it): they are divided by it in the same pass as the clipping.
  void update(double grad_norm, double lr, double grad_scale = 1.0);
  // The updates applied so far (the moments' age); a checkpoint records it and a resume sets it.
  int64_t updates() const { return updates_; }
  void set_updates(int64_t n) { updates_ = n; }

  // Checkpoints. Moment `which` (0: m, 1: v) of the whole (tp, pp) slice, a piece at a time in
  // ascending order (parallel::visit_gathered): `use(begin, n, data)` gets flat elements
  // [begin, begin + n), this rank's and, under ZeRO, every other dp rank's (the ownership ranges of
  // all dp ranks tile the buffer). Collective over dp; no rank holds more than a bucket at once.
  void visit_moment(int which, const std::function<void(size_t begin, size_t n, const float* data)>& use) const;
  // Sets flat elements [begin, begin + n) of moment `which` (0: m, 1: v) from host `part`, where
  // this rank owns them (a checkpoint loads tensor by tensor).
  void import_moment(int which, size_t begin, size_t n, const float* part);

  // The seconds the last reduce_grads()'s dp reductions themselves ran (summed over buckets,
  // timed where they run), or < 0 where the communicator does not time them (NCCL).
  double reduce_seconds() const;

  // parallel.bucket_mb: auto (parallel/bucket_sizing.hpp has the model). Collective over dp,
  // between steps: probes the dp link with the buckets' own collective, takes the slowest dp
  // rank's `backward_s`, chooses the size and re-plans the buckets at it (ZeRO-1's moments move to
  // their new owners through export/import). Every rank of the dp group decides the same bits.
  // ZeRO-2/3 keep their construction plan (the sharded parameters and gradient shards are laid
  // out by it): can_resize_buckets() is false there.
  struct AutoBuckets {
    parallel::LinkProbe probe;
    double backward_s = 0;                   // the slowest dp rank's
    parallel::BucketPrediction chosen, before;  // the model's prediction at the new and the old size
  };
  AutoBuckets auto_size_buckets(double backward_s);
  bool can_resize_buckets() const { return !sharded_; }
  // Re-plans the zero 0/1 buckets at `bucket_elems` (collective over dp at zero 1).
  void resize_buckets(size_t bucket_elems);

  int zero_stage() const { return zero_; }
  size_t bucket_count() const { return plan_.buckets.size(); }
  size_t bucket_elems() const { return bucket_elems_; }
  // Optimizer state in device memory (0 with offload) and in host memory (offload: master,
  // moments and gradient staging).
  size_t state_bytes() const { return adamw_ ? adamw_->state_bytes() : 0; }
  size_t host_state_bytes() const { return offload_ ? offload_->host_bytes() : 0; }
  bool offloaded() const { return offload_ != nullptr; }
  // Bytes of the bf16 reduction copy and its fp32 unpacked shard (0 with fp32 reduction).
  size_t reduce_buffer_bytes() const { return reduce_bytes_; }
  // What this object holds, by kind, for the memory report (bytes). `peaks`: ZeRO-2/3's per-unit
  // buffers at the most they held so far (0 before the first step).
  struct Memory {
    size_t params = 0;        // ZeRO-3: master shard (+ compute copy) and gathered units
    size_t grads = 0;         // ZeRO-2/3: gradient shard and per-unit buffers
    size_t optimizer = 0;     // moments in device memory
    size_t optimizer_host = 0;  // offload: master, moments, staging in host memory
    size_t comm_buffers = 0;  // reduction buffers: ZeRO-1's shard, bf16 copies, ZeRO-2/3 staging
  };
  Memory memory() const;
  // Makes this rank's first owned gradient NaN (LOOM_FAULT=nan@STEP, after reduce_grads()).
  void poison_grads();

 private:
  Backend& be_;
  int64_t updates_ = 0;      // update() calls so far (resumed: the checkpoint's)
  bool measuring_ = false;   // measure_local()
  double local_sq_ = 0;      // this step's count so far
  size_t counted_from_ = 0;  // [counted_from_, total) counted this step (backward goes downwards)
  ModelBuffers model_;
  parallel::ProcessGroups& groups_;
  int zero_;
  double clip_;
  size_t tied_end_ = 0;  // gradients below this offset wait for the embedding group's sum
  DistOptimConfig config_;
  size_t bucket_elems_;
  parallel::BucketPlan plan_;
  std::unique_ptr<parallel::GradBuckets> buckets_;  // ZeRO 0 and 1
  std::unique_ptr<ShardedState> sharded_;           // ZeRO 2 and 3
  std::unique_ptr<AdamW> adamw_;          // on the device (backend memory)
  std::unique_ptr<OffloadAdamW> offload_;  // or on the host (optim.offload: cpu)
  // bf16 reduction: the fp32 gradients are rounded into reduce_buf_ (the buckets' buffer) as
  // backward finishes them, [converted_from_, total) so far; the reduced values come back into
  // fp32: the model's gradients (unsharded) or owned32_ (this rank's packed shard).
  TypedPtr reduce_buf_;
  float* owned32_ = nullptr;
  size_t converted_from_ = 0;
  size_t reduce_bytes_ = 0;
  std::vector<void*> owned_;  // backend memory this object allocated
  void convert_ready(size_t from);
  void count_local(size_t from);
  void make_buckets();  // zero 0/1: plan_, buckets_ and the bf16 buffers at bucket_elems_
  // visit_moment over the state of `plan` held by `adamw` or `offload` (resize_buckets: the old one).
  void visit_state(const parallel::BucketPlan& plan, const AdamW* adamw, const OffloadAdamW* offload, int which,
                   const std::function<void(size_t begin, size_t n, const float* data)>& use) const;
  void* alloc_owned(DType t, size_t n);
  void release_owned(void* p);
  void make_adamw(const DistOptimConfig& config);
  // The reduced fp32 gradients of the owned ranges, packed (see GradBuckets::owned_grads).
  float* owned_grads();
};

}  // namespace loom
