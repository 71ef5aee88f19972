// The model's side of ZeRO-2/3 (engine/model/unit_storage.hpp), without any communication: a
// Gpt that holds nothing, on a test storage that hands out a fresh copy of a unit's weights on
// acquire and fills it with NaN on release, and a fresh zeroed gradient buffer that it adds to a
// flat copy on grads_done and then fills with NaN. Any use of a unit's weights outside an
// acquire/release pair, or any gradient written after grads_done, turns the loss or the gradients
// into NaN or loses a contribution; so bitwise equality with the model that holds everything says
// the model asks for every unit before it uses it and reports each unit's gradients only when
// they are final.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <string>
#include <vector>

#include "engine/model/gpt.hpp"
#include "kernels/backend_factory.hpp"

using namespace loom;

namespace {

const GptShape kShape = GptShape::make(3, 4, 32, 100, 16);

// "w3>4": weights of unit 3 acquired, 4 named next; "r3": released; "d3": gradients done.
std::string event(char kind, int unit, int next = -2) {
  char buf[32];
  if (next == -2)
    std::snprintf(buf, sizeof buf, "%c%d", kind, unit);
  else
    std::snprintf(buf, sizeof buf, "%c%d>%d", kind, unit, next);
  return buf;
}

class PoisoningStorage final : public UnitStorage {
 public:
  PoisoningStorage(bool weights, const std::vector<ParamUnit>& units, size_t total)
      : weights_(weights), units_(units), master_(total), grads_(total, 0.0f), held_w_(units.size()),
        held_g_(units.size()) {}
  bool holds_weights() const override { return weights_; }
  TypedPtr acquire_weights(int u, int next) override {
    events.push_back(event('w', u, next));
    auto& h = held_w_[size_t(u)];
    if (h.empty()) h.assign(master_.begin() + long(units_[size_t(u)].begin), master_.begin() + long(units_[size_t(u)].end));
    return TypedPtr(h.data());
  }
  void release_weights(int u) override {
    events.push_back(event('r', u));
    auto& h = held_w_[size_t(u)];
    std::fill(h.begin(), h.end(), std::numeric_limits<float>::quiet_NaN());
    poisoned_.push_back(std::move(h));  // keep the memory alive: a stale pointer reads NaN
    h.clear();
  }
  void set_master(size_t offset, size_t n, const float* src) override {
    std::copy(src, src + n, master_.begin() + long(offset));
  }
  void visit_master(const std::function<void(size_t, size_t, const float*)>& use) override {
    for (size_t b = 0; b < master_.size(); b += 1000) use(b, std::min<size_t>(1000, master_.size() - b), master_.data() + b);
  }
  float* acquire_grads(int u) override {
    auto& h = held_g_[size_t(u)];
    if (h.empty()) h.assign(units_[size_t(u)].size(), 0.0f);
    return h.data();
  }
  void grads_done(int u) override {
    events.push_back(event('d', u));
    auto& h = held_g_[size_t(u)];
    REQUIRE(!h.empty());
    for (size_t i = 0; i < h.size(); ++i) grads_[units_[size_t(u)].begin + i] += h[i];
    std::fill(h.begin(), h.end(), std::numeric_limits<float>::quiet_NaN());
    poisoned_.push_back(std::move(h));
    h.clear();
  }
  std::vector<float> grads() const { return grads_; }
  std::vector<std::string> events;

 private:
  bool weights_;
  std::vector<ParamUnit> units_;
  std::vector<float> master_, grads_;
  std::vector<std::vector<float>> held_w_, held_g_, poisoned_;
};

std::vector<int32_t> ids(size_t n, int mul, int add) {
  std::vector<int32_t> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = int32_t((i * size_t(mul) + size_t(add)) % size_t(kShape.vocab));
  return v;
}

struct Result {
  double loss = 0, eval_loss = 0;
  std::vector<float> grads;
};

// `micro` micro-batches accumulated, then a forward without gradients (evaluation).
Result run(Gpt& model, PoisoningStorage* storage, int micro) {
  const int B = model.micro_batch();
  const size_t N = size_t(B) * kShape.seq_len;
  std::vector<float> init(model.num_params());
  init_params(model.table(), kShape, 42, init.data());
  model.set_storage(storage);
  model.set_params(init.data());
  model.zero_grads();
  Result r;
  for (int m = 0; m < micro; ++m) {
    const auto tokens = ids(N, 7 + m, 3), targets = ids(N, 11, 5 + m);
    r.loss += model.forward(tokens.data(), targets.data(), 1.0f / float(size_t(micro) * N));
    model.backward();
  }
  const auto tokens = ids(N, 5, 1), targets = ids(N, 3, 2);
  r.eval_loss = model.forward(tokens.data(), targets.data(), 0.0f);
  if (storage) {
    r.grads = storage->grads();
  } else {
    r.grads.resize(model.num_params());
    model.get_grads(r.grads.data());
  }
  return r;
}

}  // namespace

TEST_CASE("a model on a unit storage gets the bits of the flat model, using each unit only while it holds it") {
  auto be = make_backend("cpu");
  for (Recompute rc : {Recompute::None, Recompute::Selective, Recompute::Full}) {
    INFO("recompute " << int(rc));
    Gpt flat(*be, kShape, 2, {}, {}, 1, rc);
    const Result want = run(flat, nullptr, 1), want2 = run(flat, nullptr, 2);
    for (ModelHolds holds : {ModelHolds::Weights, ModelHolds::Nothing}) {
      INFO("holds " << int(holds));
      Gpt model(*be, kShape, 2, {}, {}, 1, rc, DType::f32, holds);
      PoisoningStorage storage(holds == ModelHolds::Nothing, model.units(), model.num_params());
      const Result got = run(model, &storage, 1);
      CHECK(got.loss == want.loss);
      CHECK(got.eval_loss == want.eval_loss);
      CHECK(got.grads == want.grads);
      // Two micro-batches: the storage sums each micro-batch's own gradients, the flat model adds
      // the second into the first inside the kernels, so fp32 sums differ in order (a few ulps).
      PoisoningStorage storage2(holds == ModelHolds::Nothing, model.units(), model.num_params());
      const Result got2 = run(model, &storage2, 2);
      CHECK(got2.loss == want2.loss);
      float scale = 0, err = 0;
      for (size_t i = 0; i < want2.grads.size(); ++i) {
        scale = std::max(scale, std::fabs(want2.grads[i]));
        err = std::max(err, std::fabs(got2.grads[i] - want2.grads[i]));
      }
      CHECK(err <= 1e-6f * scale);
      CHECK(std::all_of(got2.grads.begin(), got2.grads.end(), [](float g) { return std::isfinite(g); }));
      if (holds == ModelHolds::Weights) continue;
      // Units: 0 embedding, 1..3 blocks, 4 ln_f. Forward: the embedding (prefetching block 0),
      // each block (prefetching the next), the head (ln_f, then wte again); backward: the head's
      // units still held, each block in reverse, gradients done as each finishes.
      const std::vector<std::string> micro = {"w0>1", "r0",   "w1>2", "r1",   "w2>3", "r2", "w3>4", "r3", "w4>0",
                                              "w0>-1", "w4>0", "w0>3", "r0",  "r4",   "d4", "w3>2", "r3", "d3",
                                              "w2>1", "r2",   "d2",   "w1>-1", "r1",  "d1", "d0"};
      std::vector<std::string> expect = micro;
      for (const char* e : {"w0>1", "r0", "w1>2", "r1", "w2>3", "r2", "w3>4", "r3", "w4>0", "w0>-1", "r0", "r4"})
        expect.push_back(e);  // evaluation: the head gives its units back at once
      CHECK(storage.events == expect);
    }
  }
}

TEST_CASE("param_units are the embedding, the blocks and the final LayerNorm, per pipeline stage") {
  const std::vector<ParamUnit> whole = param_units(gpt_param_table(kShape));
  REQUIRE(whole.size() == 5);
  CHECK(whole[0].kind == ParamUnit::Embedding);
  CHECK(whole[0].begin == 0);
  for (int l = 0; l < 3; ++l) CHECK((whole[size_t(l) + 1].kind == ParamUnit::Block && whole[size_t(l) + 1].layer == l));
  CHECK(whole[4].kind == ParamUnit::Final);
  for (size_t u = 1; u < whole.size(); ++u) CHECK(whole[u].begin == whole[u - 1].end);
  // A last stage of no blocks holds wte's copy and ln_f: two units, not one.
  const std::vector<ParamUnit> last = param_units(gpt_param_table(kShape, 0, 1, StageSpec{3, 0, false, true}));
  REQUIRE(last.size() == 2);
  CHECK(last[0].kind == ParamUnit::Embedding);
  CHECK(last[1].kind == ParamUnit::Final);
  // A middle stage: blocks only, the first at offset 0.
  const std::vector<ParamUnit> mid = param_units(gpt_param_table(kShape, 0, 1, StageSpec{1, 1, false, false}));
  REQUIRE(mid.size() == 1);
  CHECK((mid[0].kind == ParamUnit::Block && mid[0].layer == 1 && mid[0].begin == 0));
}
