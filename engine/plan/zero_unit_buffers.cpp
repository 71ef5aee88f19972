// unit_peaks (zero_unit_buffers.hpp): ZeRO-2/3's gradient side replayed over a step.
#include "engine/plan/zero_unit_buffers.hpp"

#include <algorithm>
#include <map>

#include "engine/optim/sharded_state.hpp"

namespace loom {
namespace {

// BufferCache's arithmetic: what it holds, per buffer size, is the most ever live at once.
class CacheModel {
 public:
  void take(size_t bytes) {
    Count& c = by_size_[bytes];
    if (++c.live > c.held) c.held = c.live;
  }
  void give(size_t bytes) { --by_size_[bytes].live; }
  double held_bytes() const {
    double b = 0;
    for (const auto& [bytes, c] : by_size_) b += double(bytes) * c.held;
    return b;
  }

 private:
  struct Count {
    int live = 0, held = 0;
  };
  std::map<size_t, Count> by_size_;
};

// One step of ShardedState's gradient side on a stage, as Gpt::backward drives it, micro-batch by
// micro-batch: the head takes the embedding's and ln_f's buffers and finishes ln_f; each block,
// last to first, takes its buffer and finishes it; the first stage's embedding lookup adds to the
// embedding's, which finishes last (a pipeline's tied copy is held over the step and reduced at
// its end). Finishing a unit starts its reduce-scatter once fewer than `in_flight` are running
// (else the oldest completes first, giving its buffers back); a unit's first reduction of the
// step goes straight into the fp32 shard, later ones (and every one in 16 bits) into a receive
// part of the unit's shard size.
void replay_gradients(const std::vector<ParamUnit>& units, bool first, bool last, bool tied, int accum, int dp,
                      int in_flight, bool reduce16, CacheModel& grads, CacheModel& staging) {
  int E = -1, F = -1;
  std::vector<int> blocks;
  for (size_t u = 0; u < units.size(); ++u) {
    if (units[u].kind == ParamUnit::Embedding) E = int(u);
    if (units[u].kind == ParamUnit::Final) F = int(u);
    if (units[u].kind == ParamUnit::Block) blocks.push_back(int(u));
  }
  const int deferred = tied ? E : -1;
  auto size = [&](int u) { return units[size_t(u)].size(); };
  auto shard = [&](int u) { return std::max<size_t>((size(u) + size_t(dp) - 1) / size_t(dp), 1); };
  struct Reduction {
    int unit;
    bool accumulate;
  };
  std::vector<Reduction> running;
  std::vector<bool> held(units.size(), false), contributed(units.size(), false);
  auto acquire = [&](int u) {
    if (u < 0 || held[size_t(u)]) return;
    held[size_t(u)] = true;
    grads.take(size(u) * 4);
  };
  auto complete_oldest = [&] {
    const Reduction r = running.front();
    running.erase(running.begin());
    if (r.accumulate && reduce16) {  // the received 16-bit sum widened before it is added
      staging.take(shard(r.unit) * 4);
      staging.give(shard(r.unit) * 4);
    }
    grads.give(size(r.unit) * 4);
    if (reduce16) staging.give(size(r.unit) * 2);
    if (r.accumulate || reduce16) staging.give(shard(r.unit) * (reduce16 ? 2 : 4));
  };
  auto start = [&](int u) {
    while (int(running.size()) >= in_flight) complete_oldest();
    held[size_t(u)] = false;
    const bool accumulate = contributed[size_t(u)];
    contributed[size_t(u)] = true;
    if (reduce16) staging.take(size(u) * 2);
    if (accumulate || reduce16) staging.take(shard(u) * (reduce16 ? 2 : 4));
    running.push_back({u, accumulate});
  };
  for (int m = 0; m < accum; ++m) {
    if (last) {
      acquire(E);
      acquire(F);
      if (F >= 0) start(F);
    }
    for (auto b = blocks.rbegin(); b != blocks.rend(); ++b) {
      acquire(*b);
      start(*b);
    }
    if (first) acquire(E);
    if (E >= 0 && (first || last) && E != deferred) start(E);
  }
  if (deferred >= 0 && held[size_t(deferred)]) start(deferred);
  while (!running.empty()) complete_oldest();
}

}  // namespace

UnitPeaks unit_peaks(const std::vector<ParamUnit>& units, const StageSpec& spec, bool prefetch, int accum, bool tied,
                     int dp, bool reduce16) {
  double E = 0, F = 0, B = 0;
  int L = 0;
  for (const ParamUnit& u : units) {
    if (u.kind == ParamUnit::Embedding) E = double(u.size());
    if (u.kind == ParamUnit::Final) F = double(u.size());
    if (u.kind == ParamUnit::Block) B = std::max(B, double(u.size())), ++L;
  }
  UnitPeaks p;
  p.weights = E + F + std::min(L, prefetch ? 2 : 1) * B;
  CacheModel grads, staging;
  replay_gradients(units, spec.first, spec.last, tied, accum, dp, ShardedStateConfig{}.reductions_in_flight, reduce16,
                   grads, staging);
  p.grads = grads.held_bytes();
  p.staging = staging.held_bytes();
  p.largest = std::max({E, F, B});
  return p;
}

}  // namespace loom
