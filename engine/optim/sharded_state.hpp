#pragma once
// ZeRO-2 and ZeRO-3's model state (docs/parallelism.md): what a Gpt built with ModelHolds::Weights
// or ModelHolds::Nothing gets unit by unit (UnitStorage) instead of holding it whole.
//
// Layout: the same BucketPlan as ZeRO-1 (rank r of dp owns part r of every bucket), with bucket
// boundaries at every unit boundary, so each unit is a run of whole buckets and this rank's parts
// of a unit are one contiguous range of the packed shard.
//
// Gradients (ZeRO 2 and 3): each unit's fp32 gradients are computed into a buffer taken for its
// backward and reduce-scattered (one non-blocking call per bucket) as soon as the unit is done, so
// the reduction overlaps the backward of the units before it; this rank's part lands in (or, for
// the second and later micro-batches of an accumulated step, is added to) the packed fp32
// gradient shard, and the unit's buffer is reused once its reduction has completed. So the
// gradient is reduced once per micro-batch (DeepSpeed's ZeRO-2 choice; accumulating full-size
// gradients would bring the full buffer back). The embedding unit of a pipeline's first and last
// stages (the tied wte) is the exception: its copies are summed over the embedding group after
// the whole pipeline schedule (summing inside one stage's backward would wait for the other
// stage, which waits for this one's gradient sends), so it accumulates over the step's
// micro-batches in its buffer and is reduced once, in finish_reductions().
//
// Weights (ZeRO 3): the fp32 master parameters exist only as this rank's packed shard (and, with
// a 16-bit compute dtype, a compute-dtype copy of it). acquire_weights all-gathers a unit into a
// buffer of the compute dtype (its bytes halve in bf16) and starts gathering the `next` unit at
// once (prefetch), so that gather runs while the model computes with this one; release_weights
// frees it. The optimizer updates the master shard in place; nothing is gathered after the update.
#include <cstddef>
#include <memory>
#include <vector>

#include "engine/model/param_table.hpp"
#include "engine/model/unit_storage.hpp"
#include "engine/optim/buffer_cache.hpp"
#include "kernels/backend.hpp"
#include "parallel/bucket_plan.hpp"
#include "parallel/communicator.hpp"

namespace loom {

struct ShardedStateConfig {
  bool shard_weights = false;       // ZeRO-3
  DType compute = DType::f32;       // gathered weights' dtype (train.precision)
  DType reduce = DType::f32;        // parallel.grad_reduce_dtype
  bool prefetch = true;             // parallel.prefetch: gather the next unit during this one
  int reductions_in_flight = 2;     // units whose reduce-scatter may run at once
  bool tp_lead = true;              // tp rank 0: counts tp-replicated tensors in local_sq()
};

// Bytes by kind, for the memory report: the shards now, and the most the per-unit buffers held.
struct ShardedMemory {
  size_t master = 0;          // ZeRO-3: fp32 master shard + its compute-dtype copy
  size_t grad_shard = 0;      // fp32 packed gradient shard
  size_t weights_peak = 0;    // ZeRO-3: gathered units, at most at once
  size_t grads_peak = 0;      // per-unit gradient buffers, at most at once
  size_t staging_peak = 0;    // reduction staging (16-bit copies, accumulation receive buffers)
};

class ShardedState final : public UnitStorage {
 public:
  // `dp`: the device data-parallel group; `host_dp`: its host-memory twin (visit_master's gathers);
  // `embedding`: the first and last stages' group (null unless pp > 1 and this stage holds wte).
  ShardedState(Backend& be, parallel::Communicator& dp, parallel::Communicator& host_dp,
               parallel::Communicator* embedding, const ParamTable& table, std::vector<ParamUnit> units,
               parallel::BucketPlan plan, ShardedStateConfig cfg);
  ~ShardedState() override;

  bool holds_weights() const override { return cfg_.shard_weights; }
  TypedPtr acquire_weights(int unit, int next) override;
  void release_weights(int unit) override;
  void set_master(size_t offset, size_t n, const float* src) override;
  void visit_master(const std::function<void(size_t begin, size_t n, const float* data)>& use) override;
  float* acquire_grads(int unit) override;
  void grads_done(int unit) override;

  // Before a step's first backward.
  void begin_step();
  // After the step's last backward: reduces the deferred (tied) unit and waits for every
  // reduction. Returns the seconds spent waiting. The gradient shard is complete afterwards.
  double finish_reductions();
  // The gradient noise scale's small batch under ZeRO-2/3: with measure_first_micro(true), the
  // squared norm of this rank's first micro-batch's gradient, unit by unit just before each
  // unit's first reduce-scatter of the step (counted as grad_norm counts, counted_norm.hpp);
  // local_sq() after finish_reductions(). Not with pipeline stages: the tied embedding unit
  // accumulates every micro-batch before its reduction (the trainer does not ask then).
  void measure_first_micro(bool on) { measuring_ = on && deferred_unit_ < 0; }
  double local_sq() const { return local_sq_; }
  // The seconds the gradient reduce-scatters finished by the last finish_reductions() ran
  // (Request::run_seconds, summed), or < 0 where the communicator does not time them.
  double reduce_seconds() const { return last_reduced_s_; }
  float* grad_shard() { return grad_shard_; }
  // ZeRO-3: the packed fp32 master shard the optimizer updates; master_updated() after an update
  // refreshes the compute-dtype copy the gathers read.
  float* master_shard() { return master_; }
  void master_updated();
  ShardedMemory memory() const;

 private:
  struct Gather {
    TypedPtr buf;
    std::vector<parallel::RequestPtr> reqs;
  };
  struct Reduction {
    int unit = -1;
    float* grads = nullptr;              // the unit's buffer, given back when done
    TypedPtr staged;                     // 16-bit copy sent (null: the fp32 buffer itself)
    TypedPtr recv;                       // received part (null: straight into the shard)
    bool accumulate = false;             // add recv to the shard (later micro-batches)
    std::vector<parallel::RequestPtr> reqs;
  };
  void start_gather(int unit);
  void wait_gather(Gather& g);
  void start_reduction(int unit);
  void complete(Reduction& r);
  void complete_oldest();
  TypedPtr take(BufferCache& cache, DType t, size_t n) { return {cache.take(n * dtype_size(t)), t}; }

  Backend& be_;
  parallel::Communicator& dp_;
  parallel::Communicator& host_dp_;
  parallel::Communicator* embedding_;
  const ParamTable& table_;
  std::vector<ParamUnit> units_;
  parallel::BucketPlan plan_;
  ShardedStateConfig cfg_;
  int me_ = 0;
  // Per unit: its buckets (indices into plan_.buckets), where its parts start in the packed
  // shard and how many elements this rank owns of it.
  std::vector<std::vector<size_t>> unit_buckets_;
  std::vector<size_t> unit_shard_begin_, unit_shard_size_;
  std::vector<size_t> part_begin_;  // per bucket: this rank's part's flat offset
  int deferred_unit_ = -1;          // the tied embedding unit (pipeline), reduced after the schedule

  float* grad_shard_ = nullptr;
  float* master_ = nullptr;         // ZeRO-3
  TypedPtr compute_shard_;          // ZeRO-3: master_ in the compute dtype (master_ itself in fp32)
  std::vector<char> contributed_;   // per unit: the shard already holds this step's sum
  std::vector<float*> grads_;       // per unit: its gradient buffer while acquired
  std::vector<std::unique_ptr<Gather>> gathered_;  // per unit (ZeRO-3): resident or in flight
  std::vector<Reduction> reductions_;              // in flight, oldest first
  BufferCache weights_cache_, grads_cache_, staging_cache_;
  double waited_s_ = 0;
  double reduced_s_ = 0;
  double last_reduced_s_ = -1;  // the reduce-scatters' own run time since the last finish_reductions (< 0: untimed)
  bool measuring_ = false;
  double local_sq_ = 0;         // this step's first micro-batch, counted so far
};

}  // namespace loom
