// LoRA in the model: which tensors train, the adapters' gradients against finite differences of
// the loss, and the frozen base untouched by backward.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <vector>

#include "engine/model/gpt.hpp"

using namespace loom;

namespace {

GptShape lora_shape(bool train_layernorm, float dropout = 0) {
  GptShape s = GptShape::make(2, 4, 32, 64, 8);
  s.lora.rank = 4;
  s.lora.alpha = 8;  // scale 2: a missing or doubled scale shows
  s.lora.train_layernorm = train_layernorm;
  s.lora.dropout = dropout;
  return s;
}

struct Fixture {
  GptShape shape;
  std::unique_ptr<Backend> be = make_cpu_backend();
  Gpt model;
  std::vector<float> params, frozen;
  std::vector<int32_t> tokens, targets;
  float dloss = 0;  // != 0: a training forward (dropout applies), with the dropout seed below
  explicit Fixture(bool train_layernorm, float dropout = 0)
      : shape(lora_shape(train_layernorm, dropout)), model(*be, shape, 2), tokens(16), targets(16) {
    params.resize(model.num_params());
    init_params(model.table(), shape, 3, params.data());
    // B starts at zero; give it values so that every adapter has a gradient.
    for (size_t i = 0; i < params.size(); ++i) params[i] += 0.05f * std::sin(0.7f * float(i));
    model.set_params(params.data());
    frozen.resize(model.frozen_table().total());
    init_params(model.frozen_table(), shape, 5, frozen.data());
    for (size_t i = 0; i < frozen.size(); ++i) frozen[i] += 0.05f * std::cos(0.3f * float(i));
    model.set_frozen(frozen.data());
    for (int i = 0; i < 16; ++i) tokens[size_t(i)] = (i * 13 + 5) % 64, targets[size_t(i)] = (i * 7 + 3) % 64;
  }
  double loss_at(const std::vector<float>& p) {
    model.set_params(p.data());
    model.set_dropout_seed(0, 12345);
    return model.forward(tokens.data(), targets.data(), dloss);
  }
};

}  // namespace

TEST_CASE("LoRA tables: the adapters (and what else trains) against the frozen base") {
  const GptShape s = lora_shape(false);
  const ParamTable train = gpt_param_table(s), frozen = gpt_param_table(s, 0, 1, {}, ParamSet::Frozen);
  for (const ParamInfo& p : train.params()) CHECK(is_lora_adapter(p.name));
  CHECK(train.params().size() == size_t(2 * 4 * 2));  // 2 layers x 4 targets x (A, B)
  CHECK(train.total() == size_t(2 * (4 * 32 + 3 * 32 * 4 + 4 * 32 + 32 * 4 + 4 * 32 + 4 * 32 * 4 + 4 * 128 + 32 * 4)));
  const GptShape plain = GptShape::make(2, 4, 32, 64, 8);
  CHECK(frozen.total() == gpt_param_table(plain).total());
  const ParamTable with_ln = gpt_param_table(lora_shape(true));
  CHECK(with_ln.find_if_held("h.1.ln2.bias"));
  CHECK(with_ln.find_if_held("ln_f.weight"));
  CHECK_FALSE(with_ln.find_if_held("wte"));
  // Tensor parallelism: a column-parallel target's B is split by rows (qkv: its q, k, v parts),
  // A replicated; a row-parallel target's A split by columns, B replicated.
  const ParamTable r1 = gpt_param_table(s, 1, 2);
  CHECK(r1.find("h.0.attn.qkv.lora_b").shape == std::vector<int64_t>{48, 4});
  CHECK(r1.find("h.0.attn.qkv.lora_b").row_runs.size() == 3);
  CHECK(r1.find("h.0.attn.qkv.lora_a").shape == std::vector<int64_t>{4, 32});
  CHECK(r1.find("h.0.mlp.proj.lora_a").shape == std::vector<int64_t>{4, 64});
  CHECK(r1.find("h.0.mlp.proj.lora_a").col_begin == 64);
  CHECK(r1.find("h.0.mlp.proj.lora_b").shape == std::vector<int64_t>{32, 4});
}

TEST_CASE("LoRA gradients match finite differences of the loss") {
  // Without dropout, with trainable LayerNorms, and with dropout 0.3 (a fixed seed: the same mask
  // in every forward, so the loss is a smooth function of the parameters).
  for (auto [train_layernorm, dropout] : {std::pair{false, 0.0f}, std::pair{true, 0.0f}, std::pair{false, 0.3f}}) {
    Fixture f(train_layernorm, dropout);
    f.dloss = dropout > 0 ? 1e-9f : 0.0f;  // a training forward; its dlogits are not used here
    const size_t n = f.model.num_params();
    f.model.zero_grads();
    f.model.set_dropout_seed(0, 12345);
    f.model.forward(f.tokens.data(), f.targets.data(), 1.0f / 16);  // dloss: the mean's gradient
    f.model.backward();
    std::vector<float> g(n);
    f.model.get_grads(g.data());
    const double gnorm = std::sqrt(std::inner_product(g.begin(), g.end(), g.begin(), 0.0));
    REQUIRE(gnorm > 1e-3);
    // Along the gradient: (L(p + h d) - L(p - h d)) / 2h = |g| for d = g / |g|.
    const double h = 1e-2;
    std::vector<float> plus = f.params, minus = f.params;
    for (size_t i = 0; i < n; ++i) plus[i] += float(h * g[i] / gnorm), minus[i] -= float(h * g[i] / gnorm);
    const double directional = (f.loss_at(plus) - f.loss_at(minus)) / (2 * h);
    INFO("train_layernorm " << train_layernorm << ", dropout " << dropout << ": |g| " << gnorm
                            << ", finite difference " << directional);
    CHECK(directional == Approx(gnorm).epsilon(2e-3));
    // Tensor by tensor: the largest coordinate of each tensor.
    for (const ParamInfo& p : f.model.table().params()) {
      size_t at = p.offset;
      for (size_t i = p.offset; i < p.offset + p.numel; ++i)
        if (std::fabs(g[i]) > std::fabs(g[at])) at = i;
      std::vector<float> a = f.params, b = f.params;
      const float e = 5e-3f;
      a[at] += e, b[at] -= e;
      const double fd = (f.loss_at(a) - f.loss_at(b)) / (2 * double(e));
      INFO(p.name << "[" << at - p.offset << "]: analytic " << g[at] << ", finite difference " << fd);
      CHECK(fd == Approx(g[at]).margin(3e-4).epsilon(2e-2));
    }
  }
}

TEST_CASE("LoRA dropout: a training forward drops (seeded, repeatable), evaluation does not") {
  Fixture f(false, 0.3f);
  auto loss = [&](uint64_t seed, float dloss) {
    f.model.set_dropout_seed(0, seed);
    return f.model.forward(f.tokens.data(), f.targets.data(), dloss);
  };
  const double eval = loss(1, 0.0f), a = loss(1, 1e-9f), b = loss(1, 1e-9f), c = loss(2, 1e-9f);
  CHECK(a == b);     // the same seed: the same mask
  CHECK(a != eval);  // training drops
  CHECK(a != c);     // another seed, another mask
  Fixture plain(false, 0.0f);
  plain.model.set_dropout_seed(0, 1);
  CHECK(plain.model.forward(plain.tokens.data(), plain.targets.data(), 0.0f) == Approx(eval).epsilon(1e-12));
}

TEST_CASE("the dropout op: rate, scale, in place, and the same mask for any column split") {
  auto be = make_cpu_backend();
  const int rows = 64, cols = 96;
  std::vector<float> x(size_t(rows) * cols);
  for (size_t i = 0; i < x.size(); ++i) x[i] = 1.0f + 0.001f * float(i);
  float* dx = be->alloc(x.size());
  float* dy = be->alloc(x.size());
  be->upload(dx, x.data(), x.size());
  be->dropout(dy, dx, 0.25f, 77, rows, cols, 0, cols);
  std::vector<float> y(x.size());
  be->download(y.data(), dy, y.size());
  size_t kept = 0;
  for (size_t i = 0; i < y.size(); ++i) {
    if (y[i] != 0.0f) {
      ++kept;
      CHECK(y[i] == Approx(x[i] / 0.75f).epsilon(1e-6));
    }
  }
  CHECK(double(kept) / double(y.size()) == Approx(0.75).margin(0.02));
  // Two column halves with their offsets into the same global width: the same mask.
  std::vector<float> left(size_t(rows) * 48), right(size_t(rows) * 48), hl(left.size()), hr(right.size());
  for (int r = 0; r < rows; ++r)
    for (int c = 0; c < 48; ++c)
      left[size_t(r) * 48 + c] = x[size_t(r) * cols + c], right[size_t(r) * 48 + c] = x[size_t(r) * cols + 48 + c];
  float* dl = be->alloc(left.size());
  float* dr = be->alloc(right.size());
  be->upload(dl, left.data(), left.size());
  be->upload(dr, right.data(), right.size());
  be->dropout(dl, dl, 0.25f, 77, rows, 48, 0, cols);   // in place
  be->dropout(dr, dr, 0.25f, 77, rows, 48, 48, cols);
  be->download(hl.data(), dl, hl.size());
  be->download(hr.data(), dr, hr.size());
  for (int r = 0; r < rows; ++r)
    for (int c = 0; c < 48; ++c) {
      REQUIRE(hl[size_t(r) * 48 + c] == y[size_t(r) * cols + c]);
      REQUIRE(hr[size_t(r) * 48 + c] == y[size_t(r) * cols + 48 + c]);
    }
  for (float* p : {dx, dy, dl, dr}) be->release(p);
}

TEST_CASE("LoRA leaves the frozen base alone and starts as the base model") {
  Fixture f(false);
  // B = 0: the adapters add nothing, so the loss is the base model's.
  std::vector<float> zero_b = f.params;
  for (const ParamInfo& p : f.model.table().params())
    if (p.name.size() > 7 && p.name.compare(p.name.size() - 7, 7, ".lora_b") == 0)
      std::fill(zero_b.begin() + long(p.offset), zero_b.begin() + long(p.offset + p.numel), 0.0f);
  const double with_zero_b = f.loss_at(zero_b);
  GptShape plain = GptShape::make(2, 4, 32, 64, 8);
  Gpt base(*f.be, plain, 2);
  // The frozen table holds the base's tensors in the base's own order.
  REQUIRE(base.num_params() == f.frozen.size());
  base.set_params(f.frozen.data());
  const double base_loss = base.forward(f.tokens.data(), f.targets.data(), 0.0f);
  CHECK(with_zero_b == Approx(base_loss).epsilon(1e-6));
}
