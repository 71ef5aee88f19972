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

GptShape lora_shape(bool train_layernorm) {
  GptShape s = GptShape::make(2, 4, 32, 64, 8);
  s.lora.rank = 4;
  s.lora.alpha = 8;  // scale 2: a missing or doubled scale shows
  s.lora.train_layernorm = train_layernorm;
  return s;
}

struct Fixture {
  GptShape shape;
  std::unique_ptr<Backend> be = make_cpu_backend();
  Gpt model;
  std::vector<float> params, frozen;
  std::vector<int32_t> tokens, targets;
  explicit Fixture(bool train_layernorm)
      : shape(lora_shape(train_layernorm)), model(*be, shape, 2), tokens(16), targets(16) {
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
    return model.forward(tokens.data(), targets.data(), 0.0f);
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
  for (bool train_layernorm : {false, true}) {
    Fixture f(train_layernorm);
    const size_t n = f.model.num_params();
    f.model.zero_grads();
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
    INFO("train_layernorm " << train_layernorm << ": |g| " << gnorm << ", finite difference " << directional);
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
