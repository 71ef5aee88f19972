#include "engine/optim/sharded_state.hpp"

#include <algorithm>
#include <chrono>
#include <stdexcept>
#include <string>

#include "engine/optim/counted_norm.hpp"
#include "parallel/grad_buckets.hpp"

namespace loom {

namespace {
double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}
}  // namespace

ShardedState::ShardedState(Backend& be, parallel::Communicator& dp, parallel::Communicator& host_dp,
                           parallel::Communicator* embedding, const ParamTable& table, std::vector<ParamUnit> units,
                           parallel::BucketPlan plan, ShardedStateConfig cfg)
    : be_(be),
      dp_(dp),
      host_dp_(host_dp),
      embedding_(embedding),
      table_(table),
      units_(std::move(units)),
      plan_(std::move(plan)),
      cfg_(cfg),
      me_(dp.rank()),
      weights_cache_(be),
      grads_cache_(be),
      staging_cache_(be) {
  if (!plan_.sharded) throw std::logic_error("ShardedState needs a sharded bucket plan");
  parallel::check_reduce_dtype(cfg_.reduce, "ShardedState");
  const size_t U = units_.size();
  unit_buckets_.resize(U);
  unit_shard_begin_.assign(U, 0);
  unit_shard_size_.assign(U, 0);
  for (size_t i = 0; i < plan_.buckets.size(); ++i) {
    const parallel::Range& b = plan_.buckets[i];
    size_t u = 0;
    while (u < U && !(units_[u].begin <= b.begin && b.end <= units_[u].end)) ++u;
    if (u == U)
      throw std::logic_error("ShardedState: bucket [" + std::to_string(b.begin) + ", " + std::to_string(b.end) +
                             ") spans two units (plan_buckets needs split_at_points)");
    size_t part = b.begin;
    for (int r = 0; r < me_; ++r) part += plan_.counts[i][size_t(r)];
    part_begin_.push_back(part);
    // Buckets are in launch order (from the end of the buffer), so a unit's buckets follow one
    // another and its parts are one run of the packed shard, starting at its first bucket's.
    if (unit_buckets_[u].empty()) unit_shard_begin_[u] = plan_.shard_offset[i];
    unit_buckets_[u].push_back(i);
    unit_shard_size_[u] += plan_.counts[i][size_t(me_)];
  }
  if (embedding_)
    for (size_t u = 0; u < U; ++u)
      if (units_[u].kind == ParamUnit::Embedding) deferred_unit_ = int(u);
  const size_t owned = std::max<size_t>(plan_.owned_size, 1);  // a rank may own nothing
  grad_shard_ = be_.alloc(owned);
  if (cfg_.shard_weights) {
    master_ = be_.alloc(owned);
    compute_shard_ = cfg_.compute == DType::f32 ? TypedPtr(master_) : be_.alloc(cfg_.compute, owned);
  }
  contributed_.assign(U, 0);
  grads_.assign(U, nullptr);
  gathered_.resize(U);
}

ShardedState::~ShardedState() {
  // Never leave a collective running into freed memory.
  for (auto& g : gathered_)
    if (g)
      for (auto& r : g->reqs) r->wait();
  for (Reduction& r : reductions_)
    for (auto& q : r.reqs) q->wait();
  be_.release(grad_shard_);
  if (master_) be_.release(master_);
  if (compute_shard_ && compute_shard_.data != master_) be_.release(compute_shard_.data);
}

// ---- weights (ZeRO-3) ----

void ShardedState::start_gather(int u) {
  const ParamUnit& unit = units_[size_t(u)];
  auto g = std::make_unique<Gather>();
  g->buf = take(weights_cache_, cfg_.compute, unit.size());
  // Each rank puts its parts in place, then each bucket is gathered in place.
  for (size_t i : unit_buckets_[size_t(u)]) {
    const size_t n = plan_.counts[i][size_t(me_)];
    if (n) be_.convert(g->buf + (part_begin_[i] - unit.begin), ConstTypedPtr(compute_shard_ + plan_.shard_offset[i]), n);
  }
  for (size_t i : unit_buckets_[size_t(u)])
    g->reqs.push_back(dp_.iall_gather(g->buf + (plan_.buckets[i].begin - unit.begin), plan_.counts[i]));
  gathered_[size_t(u)] = std::move(g);
}

void ShardedState::wait_gather(Gather& g) {
  if (g.reqs.empty()) return;
  const auto t0 = std::chrono::steady_clock::now();
  for (auto& r : g.reqs) r->wait();
  g.reqs.clear();
  waited_s_ += seconds_since(t0);
}

TypedPtr ShardedState::acquire_weights(int u, int next) {
  if (!cfg_.shard_weights) throw std::logic_error("ShardedState::acquire_weights: weights are not sharded (ZeRO-2)");
  if (!gathered_[size_t(u)]) start_gather(u);
  // Issued before waiting for this one: the gathers run in order on the communicator, the next
  // one while the model computes with this one.
  if (cfg_.prefetch && next >= 0 && !gathered_[size_t(next)]) start_gather(next);
  wait_gather(*gathered_[size_t(u)]);
  return gathered_[size_t(u)]->buf;
}

void ShardedState::release_weights(int u) {
  std::unique_ptr<Gather>& g = gathered_[size_t(u)];
  if (!g) return;
  wait_gather(*g);
  weights_cache_.give(g->buf.data);
  g.reset();
}

void ShardedState::set_master(size_t offset, size_t n, const float* src) {
  if (!master_) throw std::logic_error("ShardedState::set_master: weights are not sharded (ZeRO-2)");
  size_t packed = 0;
  for (const parallel::Range& r : plan_.owned) {
    const size_t lo = std::max(r.begin, offset), hi = std::min(r.end, offset + n);
    if (lo < hi) {
      const size_t k = packed + (lo - r.begin);
      be_.upload(master_ + k, src + (lo - offset), hi - lo);
      if (compute_shard_.data != master_) be_.convert(compute_shard_ + k, ConstTypedPtr(master_ + k), hi - lo);
    }
    packed += r.size();
  }
  for (size_t u = 0; u < units_.size(); ++u) release_weights(int(u));  // nothing stale stays gathered
}

void ShardedState::visit_master(const std::function<void(size_t begin, size_t n, const float* data)>& use) {
  if (!master_) throw std::logic_error("ShardedState::visit_master: weights are not sharded (ZeRO-2)");
  parallel::visit_gathered(
      host_dp_, plan_, table_.total(),
      [&](parallel::Range part, size_t packed, float* dst) { be_.download(dst, master_ + packed, part.size()); }, use);
}

void ShardedState::master_updated() {
  for (size_t u = 0; u < units_.size(); ++u) release_weights(int(u));
  if (compute_shard_.data != master_) be_.convert(compute_shard_, ConstTypedPtr(master_), plan_.owned_size);
}

// ---- gradients (ZeRO-2 and 3) ----

void ShardedState::begin_step() {
  std::fill(contributed_.begin(), contributed_.end(), 0);
  local_sq_ = 0;
}

float* ShardedState::acquire_grads(int u) {
  if (!grads_[size_t(u)]) {
    const size_t n = units_[size_t(u)].size();
    grads_[size_t(u)] = static_cast<float*>(grads_cache_.take(n * sizeof(float)));
    be_.zero(grads_[size_t(u)], n);
  }
  return grads_[size_t(u)];
}

void ShardedState::grads_done(int u) {
  if (u == deferred_unit_) return;  // summed over the embedding group first: finish_reductions()
  start_reduction(u);
}

void ShardedState::start_reduction(int u) {
  if (!grads_[size_t(u)]) throw std::logic_error("ShardedState: gradients done for a unit never acquired");
  // Bound the gradient memory: at most reductions_in_flight units' buffers wait for the network.
  while (int(reductions_.size()) >= cfg_.reductions_in_flight) complete_oldest();
  const ParamUnit& unit = units_[size_t(u)];
  Reduction r;
  r.unit = u;
  r.grads = grads_[size_t(u)];
  grads_[size_t(u)] = nullptr;
  r.accumulate = contributed_[size_t(u)] != 0;
  contributed_[size_t(u)] = 1;
  // The unit's first reduction of the step carries the first micro-batch's gradient alone (each
  // micro-batch's backward takes a fresh, zeroed buffer).
  if (measuring_ && !r.accumulate)
    local_sq_ += counted_sum_squares(be_, table_, r.grads, unit.begin, unit.begin, unit.end, cfg_.tp_lead);
  TypedPtr send(r.grads);
  if (cfg_.reduce != DType::f32) {
    r.staged = take(staging_cache_, cfg_.reduce, unit.size());
    be_.convert(r.staged, ConstTypedPtr(r.grads), unit.size());
    send = r.staged;
  }
  // Straight into the shard the first time in a step in fp32; otherwise into a receive buffer
  // that complete() converts and adds.
  TypedPtr recv = TypedPtr(grad_shard_) + unit_shard_begin_[size_t(u)];
  if (r.accumulate || cfg_.reduce != DType::f32) {
    r.recv = take(staging_cache_, cfg_.reduce, std::max<size_t>(unit_shard_size_[size_t(u)], 1));
    recv = r.recv;
  }
  size_t k = 0;  // this rank's part of each bucket, packed in the unit's run of the shard
  for (size_t i : unit_buckets_[size_t(u)]) {
    r.reqs.push_back(dp_.ireduce_scatter(ConstTypedPtr(send + (plan_.buckets[i].begin - unit.begin)), recv + k,
                                         plan_.counts[i]));
    k += plan_.counts[i][size_t(me_)];
  }
  reductions_.push_back(std::move(r));
}

void ShardedState::complete(Reduction& r) {
  const auto t0 = std::chrono::steady_clock::now();
  for (auto& q : r.reqs) {
    q->wait();
    const double ran = q->run_seconds();
    reduced_s_ = reduced_s_ < 0 || ran < 0 ? -1 : reduced_s_ + ran;
  }
  waited_s_ += seconds_since(t0);
  const size_t n = unit_shard_size_[size_t(r.unit)];
  float* shard = grad_shard_ + unit_shard_begin_[size_t(r.unit)];
  if (r.recv && n) {
    if (!r.accumulate) {
      be_.convert(TypedPtr(shard), ConstTypedPtr(r.recv), n);  // 16-bit sum into fp32
    } else {
      TypedPtr sum = r.recv;
      if (cfg_.reduce != DType::f32) {
        sum = take(staging_cache_, DType::f32, n);
        be_.convert(sum, ConstTypedPtr(r.recv), n);
      }
      be_.residual_forward(TypedPtr(shard), ConstTypedPtr(shard), ConstTypedPtr(sum), n);
      if (sum.data != r.recv.data) staging_cache_.give(sum.data);
    }
  }
  grads_cache_.give(r.grads);
  if (r.staged) staging_cache_.give(r.staged.data);
  if (r.recv) staging_cache_.give(r.recv.data);
  r.reqs.clear();
}

void ShardedState::complete_oldest() {
  complete(reductions_.front());
  reductions_.erase(reductions_.begin());
}

double ShardedState::finish_reductions() {
  if (deferred_unit_ >= 0 && grads_[size_t(deferred_unit_)]) {
    // The tied wte: the first stage's (lookup) and the last stage's (head) gradients summed, so
    // both copies take the same update and stay identical.
    const ParamUnit& unit = units_[size_t(deferred_unit_)];
    for (const ParamInfo& p : table_.params())
      if (p.tied && p.offset >= unit.begin && p.offset < unit.end)
        embedding_->all_reduce(grads_[size_t(deferred_unit_)] + (p.offset - unit.begin), p.numel,
                               parallel::ReduceOp::Sum);
    start_reduction(deferred_unit_);
  }
  while (!reductions_.empty()) complete_oldest();
  const double waited = waited_s_;
  waited_s_ = 0;
  last_reduced_s_ = reduced_s_;
  reduced_s_ = 0;
  return waited;
}

ShardedMemory ShardedState::memory() const {
  ShardedMemory m;
  const size_t owned = std::max<size_t>(plan_.owned_size, 1);
  m.grad_shard = owned * sizeof(float);
  if (master_) m.master = owned * sizeof(float) + (compute_shard_.data != master_ ? owned * dtype_size(cfg_.compute) : 0);
  m.weights_peak = weights_cache_.peak_bytes();
  m.grads_peak = grads_cache_.peak_bytes();
  m.staging_peak = staging_cache_.peak_bytes();
  return m;
}

}  // namespace loom
