#include "engine/optim/distributed_optimizer.hpp"

#include <algorithm>
#include <cmath>
#include <limits>

#include "engine/optim/owned_pieces.hpp"

namespace loom {

DistributedOptimizer::DistributedOptimizer(Backend& backend, ModelBuffers model, parallel::ProcessGroups& groups,
                                           DistOptimConfig config)
    : be_(backend), model_(std::move(model)), groups_(groups), zero_(config.zero), clip_(config.grad_clip) {
  const ParamTable& table = *model_.table;
  // Tied tensors (wte on a pipeline's first and last stages) are summed over the embedding group
  // first; their buckets are launched only after that (they sit at the start of the buffer).
  if (groups_.device_embedding())
    for (const ParamInfo& p : table.params())
      if (p.tied) tied_end_ = std::max(tied_end_, p.offset + p.numel);
  parallel::Communicator& dp = groups_.device_dp();
  const std::vector<parallel::Range> buckets =
      parallel::plan_buckets(table.total(), config.bucket_elems, model_.ready_points);
  buckets_ = std::make_unique<parallel::GradBuckets>(
      dp, model_.grads, parallel::plan_bucket_shards(table.total(), buckets, zero_ >= 1, dp.size(), dp.rank()),
      [this](size_t n) { return be_.alloc(n); });
  adamw_ = std::make_unique<AdamW>(be_, table, config.adamw, buckets_->plan().owned);
}

DistributedOptimizer::~DistributedOptimizer() = default;

void DistributedOptimizer::grads_ready_from(size_t offset) { buckets_->grads_ready_from(std::max(offset, tied_end_)); }

double DistributedOptimizer::reduce_grads() {
  if (parallel::Communicator* emb = groups_.device_embedding()) {
    // Tied embedding: the first stage's (lookup) and the last stage's (head) gradients summed, so
    // both copies take the same update and stay identical.
    for (const ParamInfo& p : model_.table->params())
      if (p.tied) emb->all_reduce(model_.grads + p.offset, p.numel, parallel::ReduceOp::Sum);
  }
  return buckets_->finish();
}

double DistributedOptimizer::grad_norm() {
  // Each element of the global gradient counted once: under ZeRO every dp rank sums only the
  // parts it owns; a tensor replicated over tp (LayerNorms, wpe, row-parallel biases) is counted
  // by tp rank 0 only; a tied copy by the stage that owns the original. Partial sums are added in
  // rank order, so every rank gets the same bits.
  const bool tp_lead = groups_.coord().tp == 0;
  const float* packed = buckets_->owned_grads();
  double local = 0;
  for_each_owned_piece(buckets_->plan().owned, *model_.table, [&](const ParamInfo& p, size_t lo, size_t hi, size_t k) {
    if (!p.tied_copy && (tp_lead || p.split != TpSplit::Replicated)) local += be_.sum_squares(packed + k, hi - lo);
  });
  if (zero_ >= 1) local = groups_.dp().sum_ordered(local);
  local = groups_.pp().sum_ordered(local);
  return std::sqrt(groups_.tp().sum_ordered(local));
}

void DistributedOptimizer::update(double grad_norm, double lr, int64_t t, double grad_scale) {
  float* grads = buckets_->owned_grads();
  // One pass: unscale (fp16's loss scale) and clip (the true norm is grad_norm).
  double factor = 1.0 / grad_scale;
  if (clip_ > 0 && grad_norm > clip_) factor *= clip_ / (grad_norm + 1e-6);
  if (factor != 1.0) be_.scale(grads, buckets_->plan().owned_size, float(factor));
  adamw_->step(model_.params, grads, lr, t);
  buckets_->all_gather_parts(model_.params);
}

void DistributedOptimizer::export_moments(float* full_m, float* full_v) {
  adamw_->export_state(full_m, full_v);
  // Host arrays: gathered over the host (MPI) dp group, whatever the backend.
  parallel::all_gather_parts(groups_.dp(), buckets_->plan(), full_m);
  parallel::all_gather_parts(groups_.dp(), buckets_->plan(), full_v);
}

void DistributedOptimizer::import_moment(int which, size_t begin, size_t n, const float* part) {
  adamw_->import_state(which, begin, n, part);
}

void DistributedOptimizer::poison_grads() {
  if (buckets_->plan().owned_size == 0) return;
  const float nan = std::numeric_limits<float>::quiet_NaN();
  be_.upload(buckets_->owned_grads(), &nan, 1);
}

}  // namespace loom
