#include "engine/optim/distributed_optimizer.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <stdexcept>

#include "engine/optim/counted_norm.hpp"
#include "engine/optim/owned_pieces.hpp"

namespace loom {

DistributedOptimizer::DistributedOptimizer(Backend& backend, ModelBuffers model, parallel::ProcessGroups& groups,
                                           DistOptimConfig config)
    : be_(backend),
      model_(std::move(model)),
      groups_(groups),
      zero_(config.zero),
      clip_(config.grad_clip),
      config_(config),
      bucket_elems_(config.bucket_elems) {
  const ParamTable& table = *model_.table;
  // Tied tensors (wte on a pipeline's first and last stages) are summed over the embedding group
  // first; their buckets are launched only after that (they sit at the start of the buffer).
  if (groups_.device_embedding())
    for (const ParamInfo& p : table.params())
      if (p.tied) tied_end_ = std::max(tied_end_, p.offset + p.numel);
  parallel::Communicator& dp = groups_.device_dp();
  if (zero_ >= 2) {
    // Unit by unit: every unit boundary is a bucket boundary (sharded_state.hpp).
    std::vector<size_t> starts;
    for (const ParamUnit& u : model_.units) starts.push_back(u.begin);
    plan_ = parallel::plan_bucket_shards(
        table.total(), parallel::plan_buckets(table.total(), config.bucket_elems, starts, true), true, dp.size(),
        dp.rank());
    ShardedStateConfig sc;
    sc.shard_weights = zero_ == 3;
    sc.compute = model_.compute;
    sc.reduce = config.reduce_dtype;
    sc.prefetch = config.prefetch;
    sc.tp_lead = groups_.coord().tp == 0;
    sharded_ = std::make_unique<ShardedState>(be_, dp, groups_.dp(), groups_.device_embedding(), table, model_.units,
                                              plan_, sc);
    make_adamw(config);
    return;
  }
  if (config.reduce_dtype != DType::f32) {
    reduce_buf_ = TypedPtr(alloc_owned(config.reduce_dtype, table.total()), config.reduce_dtype);
    converted_from_ = table.total();
  }
  make_buckets();
  make_adamw(config);
}

void* DistributedOptimizer::alloc_owned(DType t, size_t n) {
  void* p = be_.alloc(t, n).data;
  owned_.push_back(p);
  return p;
}

void DistributedOptimizer::release_owned(void* p) {
  if (!p) return;
  owned_.erase(std::remove(owned_.begin(), owned_.end(), p), owned_.end());
  be_.release(p);
}

void DistributedOptimizer::make_buckets() {
  const size_t total = model_.table->total();
  parallel::Communicator& dp = groups_.device_dp();
  plan_ = parallel::plan_bucket_shards(total, parallel::plan_buckets(total, bucket_elems_, model_.ready_points),
                                       zero_ >= 1, dp.size(), dp.rank());
  auto alloc = [this](DType t, size_t n) { return TypedPtr(alloc_owned(t, n), t); };
  if (!reduce_buf_) {
    buckets_ = std::make_unique<parallel::GradBuckets>(dp, model_.grads, plan_, alloc);
    return;
  }
  buckets_ = std::make_unique<parallel::GradBuckets>(dp, reduce_buf_, plan_, alloc);
  const size_t owned = plan_.owned_size;
  reduce_bytes_ = total * dtype_size(config_.reduce_dtype);
  if (plan_.sharded) {
    owned32_ = static_cast<float*>(alloc_owned(DType::f32, std::max<size_t>(owned, 1)));  // a rank may own nothing
    reduce_bytes_ += owned * (dtype_size(config_.reduce_dtype) + sizeof(float));
  }
}

void DistributedOptimizer::resize_buckets(size_t bucket_elems) {
  if (sharded_) throw std::logic_error("resize_buckets: ZeRO-2/3 keep the plan their shards are laid out by");
  if (bucket_elems == bucket_elems_) return;
  // ZeRO-1: the moments are packed by the plan's ownership. The old state stays until the new is
  // made, and the old moments pass by a bucket at a time (collective) into the new parts: two
  // shards at once, never a host copy of every moment.
  const parallel::BucketPlan old_plan = plan_;
  std::unique_ptr<AdamW> old_adamw;
  std::unique_ptr<OffloadAdamW> old_offload;
  if (plan_.sharded) {
    old_adamw = std::move(adamw_);
    old_offload = std::move(offload_);
    release_owned(buckets_->owned_grads_typed().data);  // the old shard buffer
  }
  buckets_.reset();
  release_owned(owned32_);
  owned32_ = nullptr;
  bucket_elems_ = bucket_elems;
  make_buckets();
  if (old_plan.sharded) {
    make_adamw(config_);
    for (int which : {0, 1})
      visit_state(old_plan, old_adamw.get(), old_offload.get(), which,
                  [&](size_t begin, size_t n, const float* data) { import_moment(which, begin, n, data); });
  }
}

double DistributedOptimizer::reduce_seconds() const {
  return sharded_ ? sharded_->reduce_seconds() : buckets_->reduce_seconds();
}

DistributedOptimizer::AutoBuckets DistributedOptimizer::auto_size_buckets(double backward_s) {
  AutoBuckets a;
  const size_t total = model_.table->total();
  const DType wire = reduce_buf_ ? config_.reduce_dtype : DType::f32;
  // 64 KiB, 512 KiB, 4 MiB: alpha from the small calls, beta from the large (the buckets'
  // sizes lie in between); 3 repeats each. About 0.3 s at 1 Gbit, milliseconds on a node.
  const std::vector<size_t> sizes = {size_t(64) << 10, size_t(512) << 10, size_t(4) << 20};
  const size_t largest = sizes.back() / dtype_size(wire) + size_t(groups_.device_dp().size());
  // LOOM_BUCKET_LINK=ALPHA_MS:GB_S replaces the probe (tests, and "what if the link were ..."); every
  // rank must be given the same.
  double env_alpha_ms = 0, env_gb_s = 0;
  if (const char* e = std::getenv("LOOM_BUCKET_LINK"); e && std::sscanf(e, "%lf:%lf", &env_alpha_ms, &env_gb_s) == 2 &&
                                                        env_gb_s > 0) {
    a.probe.link = parallel::LinkModel{env_alpha_ms / 1e3, env_gb_s * 1e9};
  } else {
    TypedPtr scratch = be_.alloc(wire, 2 * largest);
    try {
      a.probe = parallel::probe_link(groups_.device_dp(), groups_.dp(), scratch, plan_.sharded, sizes, 3,
                                     [this] { be_.synchronize(); });
    } catch (...) {
      be_.release(scratch.data);
      throw;
    }
    be_.release(scratch.data);
  }
  float slowest = float(backward_s);  // float: an exact Max; the same bits on every dp rank
  groups_.dp().all_reduce(&slowest, 1, parallel::ReduceOp::Max);
  a.backward_s = slowest;
  parallel::BucketSizing in;
  in.n = total;
  in.wire_bytes = dtype_size(wire);
  in.ready_points = model_.ready_points;
  in.backward_s = a.backward_s;
  in.link = a.probe.link;
  a.before = parallel::predict_buckets(in, bucket_elems_);
  a.chosen = parallel::choose_bucket_size(in);
  resize_buckets(a.chosen.bucket_elems);
  return a;
}

void DistributedOptimizer::make_adamw(const DistOptimConfig& config) {
  if (config.offload)
    offload_ = std::make_unique<OffloadAdamW>(be_, *model_.table, config.adamw, plan_.owned);
  else
    adamw_ = std::make_unique<AdamW>(be_, *model_.table, config.adamw, plan_.owned);
}

DistributedOptimizer::~DistributedOptimizer() {
  buckets_.reset();  // waits for reductions in flight before their buffers go
  sharded_.reset();
  for (void* p : owned_) be_.release(p);
}

float* DistributedOptimizer::owned_grads() {
  if (sharded_) return sharded_->grad_shard();
  if (!reduce_buf_) return buckets_->owned_grads();
  return plan_.sharded ? owned32_ : model_.grads;
}

void DistributedOptimizer::begin_step() {
  if (sharded_) sharded_->begin_step();
  local_sq_ = 0;
  counted_from_ = model_.table->total();
}

double DistributedOptimizer::counted_sum_squares(size_t begin, size_t end) {
  if (sharded_) throw std::logic_error("counted_sum_squares: ZeRO-2/3 hold no whole gradient");
  return loom::counted_sum_squares(be_, *model_.table, model_.grads, 0, begin, end, groups_.coord().tp == 0);
}

bool DistributedOptimizer::can_measure_local() const { return !sharded_ || groups_.layout().pp == 1; }

void DistributedOptimizer::measure_local(bool on) {
  on = on && can_measure_local();
  if (sharded_) sharded_->measure_first_micro(on);
  else measuring_ = on;
}

double DistributedOptimizer::local_sq() const { return sharded_ ? sharded_->local_sq() : local_sq_; }

// The noise scale's count of [from, counted_from_): called just before those gradients'
// buckets can be launched (a reduction in place would change them).
void DistributedOptimizer::count_local(size_t from) {
  if (!measuring_ || from >= counted_from_) return;
  local_sq_ += counted_sum_squares(from, counted_from_);
  counted_from_ = from;
}

// bf16 reduction: rounds the gradients [from, converted_from_) that just became final into the
// reduction buffer (offsets only decrease within a step).
void DistributedOptimizer::convert_ready(size_t from) {
  if (!reduce_buf_ || from >= converted_from_) return;
  be_.convert(reduce_buf_ + from, ConstTypedPtr(model_.grads + from), converted_from_ - from);
  converted_from_ = from;
}

void DistributedOptimizer::grads_ready_from(size_t offset) {
  if (!buckets_) return;  // ZeRO-2/3 reduce unit by unit (ShardedState)
  const size_t from = std::max(offset, tied_end_);
  count_local(from);
  convert_ready(from);
  buckets_->grads_ready_from(from);
}

double DistributedOptimizer::reduce_grads() {
  if (sharded_) return sharded_->finish_reductions();  // the tied sum included
  if (parallel::Communicator* emb = groups_.device_embedding()) {
    // Tied embedding: the first stage's (lookup) and the last stage's (head) gradients summed, so
    // both copies take the same update and stay identical.
    for (const ParamInfo& p : model_.table->params())
      if (p.tied) emb->all_reduce(model_.grads + p.offset, p.numel, parallel::ReduceOp::Sum);
  }
  count_local(0);
  convert_ready(0);
  const double waited = buckets_->finish();
  if (reduce_buf_) {  // the bf16 sums back into fp32, where the norm and the update read them
    const TypedPtr reduced = buckets_->owned_grads_typed();
    be_.convert(owned_grads(), ConstTypedPtr(reduced), plan_.owned_size);
    converted_from_ = model_.table->total();
  }
  return waited;
}

double DistributedOptimizer::grad_norm() {
  // Each element of the global gradient counted once: under ZeRO every dp rank sums only the
  // parts it owns; a tensor replicated over tp (LayerNorms, wpe, row-parallel biases) is counted
  // by tp rank 0 only; a tied copy by the stage that owns the original. Partial sums are added in
  // rank order, so every rank gets the same bits.
  const bool tp_lead = groups_.coord().tp == 0;
  const float* packed = owned_grads();
  double local = 0;
  for_each_owned_piece(plan_.owned, *model_.table, [&](const ParamInfo& p, size_t lo, size_t hi, size_t k) {
    if (!p.tied_copy && (tp_lead || p.split != TpSplit::Replicated)) local += be_.sum_squares(packed + k, hi - lo);
  });
  if (zero_ >= 1) local = groups_.dp().sum_ordered(local);
  local = groups_.pp().sum_ordered(local);
  return std::sqrt(groups_.tp().sum_ordered(local));
}

void DistributedOptimizer::update(double grad_norm, double lr, double grad_scale) {
  const int64_t t = ++updates_;  // 1-based, for the bias correction
  float* grads = owned_grads();
  // One pass: unscale (fp16's loss scale) and clip (the true norm is grad_norm).
  double factor = 1.0 / grad_scale;
  if (clip_ > 0 && grad_norm > clip_) factor *= clip_ / (grad_norm + 1e-6);
  if (offload_) {
    // The factor is applied on the host, in the update's pass (the same bits as scaling here).
    offload_->step(zero_ == 3 ? sharded_->master_shard() : model_.params, zero_ == 3, grads, lr, t, float(factor));
    if (zero_ == 3)
      sharded_->master_updated();
    else
      parallel::all_gather_parts(groups_.device_dp(), plan_, TypedPtr(model_.params));
    return;
  }
  if (factor != 1.0) be_.scale(grads, plan_.owned_size, float(factor));
  if (zero_ == 3) {
    // The master shard is all there is; the next forward gathers from it.
    adamw_->step_packed(sharded_->master_shard(), grads, lr, t);
    sharded_->master_updated();
    return;
  }
  adamw_->step(model_.params, grads, lr, t);
  parallel::all_gather_parts(groups_.device_dp(), plan_, TypedPtr(model_.params));
}

void DistributedOptimizer::visit_moment(int which,
                                        const std::function<void(size_t begin, size_t n, const float* data)>& use) const {
  visit_state(plan_, adamw_.get(), offload_.get(), which, use);
}

void DistributedOptimizer::visit_state(const parallel::BucketPlan& plan, const AdamW* adamw,
                                       const OffloadAdamW* offload, int which,
                                       const std::function<void(size_t begin, size_t n, const float* data)>& use) const {
  // Host pieces: gathered over the host (MPI) dp group, whatever the backend.
  parallel::visit_gathered(
      groups_.dp(), plan, model_.table->total(),
      [&](parallel::Range part, size_t packed, float* dst) {
        if (offload)
          offload->read_state(which, packed, part.size(), dst);
        else
          adamw->read_state(which, packed, part.size(), dst);
      },
      use);
}

void DistributedOptimizer::import_moment(int which, size_t begin, size_t n, const float* part) {
  if (offload_)
    offload_->import_state(which, begin, n, part);
  else
    adamw_->import_state(which, begin, n, part);
}

DistributedOptimizer::Memory DistributedOptimizer::memory() const {
  Memory m;
  m.optimizer = state_bytes();
  m.optimizer_host = host_state_bytes();
  if (sharded_) {
    const ShardedMemory s = sharded_->memory();
    m.params = s.master + s.weights_peak;
    m.grads = s.grad_shard + s.grads_peak;
    m.comm_buffers = s.staging_peak;
  } else {
    // GradBuckets' shard receive buffer (ZeRO-1, fp32 reduction) or the bf16 copies.
    m.comm_buffers = reduce_buf_ ? reduce_bytes_ : plan_.sharded ? std::max<size_t>(plan_.owned_size, 1) * sizeof(float) : 0;
  }
  return m;
}

void DistributedOptimizer::poison_grads() {
  if (plan_.owned_size == 0) return;
  const float nan = std::numeric_limits<float>::quiet_NaN();
  be_.upload(owned_grads(), &nan, 1);
}

}  // namespace loom
