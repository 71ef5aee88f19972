// The CPU model against PyTorch: scripts/make_golden.py builds the same tiny GPT in float64
// and stores its weights, logits, loss, every gradient and 10 AdamW steps in
// tests/data/gpt_tiny_golden.bin. Loom computes in fp32 from the same weights.
//
// Tolerance: 1e-5 relative. For tensors, the largest absolute difference must be within 1e-5 of
// the tensor's largest magnitude (an fp32 dot product of length 4C = 192 carries ~1e-6 relative
// error; Adam over 10 steps amplifies it a little). Scalars (losses, norms): 1e-5 relative.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <string>

#include "engine/model/gpt.hpp"
#include "engine/optim/adamw.hpp"
#include "engine/optim/lr_schedule.hpp"
#include "golden_file.hpp"

using namespace loom;

namespace {

constexpr double kRel = 1e-5;

void check_close(const std::string& what, const float* got, const float* ref, size_t n) {
  double scale = 0, max_err = 0;
  size_t worst = 0;
  for (size_t i = 0; i < n; ++i) {
    scale = std::max(scale, double(std::fabs(ref[i])));
    const double e = std::fabs(double(got[i]) - ref[i]);
    if (e > max_err) max_err = e, worst = i;
  }
  INFO(what << ": max |diff| " << max_err << " at " << worst << " (got " << got[worst] << ", ref " << ref[worst]
            << "), max |ref| " << scale);
  CHECK(max_err <= kRel * scale);
}

}  // namespace

TEST_CASE("tiny GPT matches PyTorch: logits, loss, gradients and 10 AdamW steps") {
  auto g = test::read_golden(LOOM_TEST_DATA_DIR "/gpt_tiny_golden.bin");
  const auto& cfg = g.at("config").i32;  // V, T, L, NH, C, B, n_steps
  const int V = cfg[0], T = cfg[1], L = cfg[2], NH = cfg[3], C = cfg[4], B = cfg[5], n_steps = cfg[6];
  GptShape shape = GptShape::make(L, NH, C, V, T);
  REQUIRE(shape.vocab_pad == 128);
  auto backend = make_cpu_backend();
  Gpt model(*backend, shape, B);

  // Weights from the golden file; wte arrives as (V, C) and is padded with zero rows to (Vp, C).
  std::vector<float> params(model.num_params(), 0.0f);
  for (const auto& p : model.table().params()) {
    const auto& ref = g.at("param/" + p.name).f32;
    REQUIRE(ref.size() <= p.numel);
    std::copy(ref.begin(), ref.end(), params.begin() + p.offset);
  }
  model.set_params(params.data());
  const int32_t* tokens = g.at("tokens").i32.data();
  const int32_t* targets = g.at("targets").i32.data();

  SECTION("forward: logits and loss") {
    const double loss = model.forward(tokens, targets, 0.0f);
    CHECK(loss == Approx(g.at("loss").f32[0]).epsilon(kRel));
    std::vector<float> logits = model.logits(), real(size_t(B) * T * V);
    for (int i = 0; i < B * T; ++i)
      std::copy_n(logits.begin() + size_t(i) * shape.vocab_pad, V, real.begin() + size_t(i) * V);
    check_close("logits", real.data(), g.at("logits").f32.data(), real.size());
  }

  SECTION("backward: every parameter's gradient") {
    model.zero_grads();
    model.forward(tokens, targets, 1.0f / float(B * T));
    model.backward();
    std::vector<float> grads(model.num_params());
    model.get_grads(grads.data());
    for (const auto& p : model.table().params()) {
      const auto& ref = g.at("grad/" + p.name).f32;
      check_close("grad/" + p.name, grads.data() + p.offset, ref.data(), ref.size());
      // The padding rows of wte get no gradient at all.
      for (size_t i = ref.size(); i < p.numel; ++i) REQUIRE(grads[p.offset + i] == 0.0f);
    }
  }

  SECTION("10 AdamW steps with clipping and the warmup+cosine schedule") {
    const auto& o = g.at("optim").f32;  // lr, min_lr, warmup, steps, wd, beta1, beta2, eps, clip
    LrSchedule sched{o[0], o[1], int64_t(o[2]), int64_t(o[3])};
    AdamW opt(*backend, model.table(), AdamWHyper{o[5], o[6], o[7], o[4]});
    const auto& losses = g.at("losses").f32;
    const auto& norms = g.at("grad_norms").f32;
    for (int s = 0; s < n_steps; ++s) {
      model.zero_grads();
      const double loss = model.forward(tokens, targets, 1.0f / float(B * T));
      model.backward();
      const double norm = clip_grad_norm(*backend, model.grads(), model.num_params(), o[8]);
      opt.step(model.params(), model.grads(), sched.at(s), s + 1);
      INFO("step " << s);
      CHECK(loss == Approx(losses[s]).epsilon(kRel));
      CHECK(norm == Approx(norms[s]).epsilon(kRel));
    }
  }
}

TEST_CASE("initialisation is GPT-2's and a pure function of the seed") {
  GptShape s = GptShape::make(4, 4, 64, 300, 32);
  ParamTable t = gpt_param_table(s);
  std::vector<float> a(t.total()), b(t.total()), c(t.total());
  init_params(t, s, 7, a.data());
  init_params(t, s, 7, b.data());
  init_params(t, s, 8, c.data());
  CHECK(a == b);
  CHECK(a != c);
  auto stddev = [&](const std::string& name) {
    const auto& p = t.find(name);
    size_t n = name == "wte" ? size_t(s.vocab) * s.d_model : p.numel;
    double sq = 0;
    for (size_t i = 0; i < n; ++i) sq += double(a[p.offset + i]) * a[p.offset + i];
    return std::sqrt(sq / n);
  };
  CHECK(stddev("wte") == Approx(0.02).epsilon(0.03));
  CHECK(stddev("h.0.mlp.fc.weight") == Approx(0.02).epsilon(0.03));
  CHECK(stddev("h.3.attn.proj.weight") == Approx(0.02 / std::sqrt(8.0)).epsilon(0.05));
  const auto& wte = t.find("wte");
  for (size_t i = size_t(s.vocab) * s.d_model; i < wte.numel; ++i) REQUIRE(a[wte.offset + i] == 0.0f);
  const auto& ln = t.find("h.2.ln1.weight");
  for (size_t i = 0; i < ln.numel; ++i) REQUIRE(a[ln.offset + i] == 1.0f);
  CHECK(t.find("h.2.ln1.bias").weight_decay == false);
  CHECK(t.find("h.2.attn.qkv.weight").weight_decay == true);
}
