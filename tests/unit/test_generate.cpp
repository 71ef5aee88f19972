// Generation: the KV-cache decoder against the training model's full forward (the same weights,
// the logits at every position), and the token sampler's greedy, top-k, top-p and seeding.
#include <catch2/catch.hpp>

#include <cmath>
#include <map>
#include <vector>

#include "engine/generate/token_sampler.hpp"
#include "engine/model/gpt.hpp"
#include "engine/model/gpt_decoder.hpp"
#include "kernels/backend_factory.hpp"

using namespace loom;

namespace {

double max_diff(const float* a, const float* b, size_t n) {
  double d = 0;
  for (size_t i = 0; i < n; ++i) d = std::max(d, double(std::fabs(a[i] - b[i])));
  return d;
}

}  // namespace

TEST_CASE("the KV-cache decoder's logits equal the full forward's at every position") {
  const int L = 2, NH = 4, C = 32, V = 100, T = 16;
  const GptShape shape = GptShape::make(L, NH, C, V, T);
  auto be = make_cpu_backend();
  Gpt model(*be, shape, 1);
  std::vector<float> params(model.num_params());
  init_params(model.table(), shape, 7, params.data());
  // Non-trivial LayerNorms and biases: perturb every parameter a little.
  for (size_t i = 0; i < params.size(); ++i) params[i] += 0.05f * std::sin(float(i));
  model.set_params(params.data());
  std::vector<int32_t> tokens(T), targets(T, 0);
  for (int t = 0; t < T; ++t) tokens[size_t(t)] = (t * 37 + 11) % V;
  model.forward(tokens.data(), targets.data(), 0.0f);
  const std::vector<float> full = model.logits();  // (T, Vp)
  const int Vp = shape.vocab_pad;

  GptDecoder dec(*be, shape, TensorParallel{}, 1);
  REQUIRE(dec.table().total() == model.num_params());
  dec.set_params(params.data());
  // A 5-token prompt (every position's logits), then one token at a time.
  const int prompt = 5;
  std::vector<float> got = dec.step(tokens.data(), prompt, true);
  REQUIRE(got.size() == size_t(prompt) * V);
  for (int t = 0; t < prompt; ++t) {
    INFO("prompt position " << t);
    CHECK(max_diff(got.data() + size_t(t) * V, full.data() + size_t(t) * Vp, V) < 1e-5);
  }
  for (int t = prompt; t < T; ++t) {
    got = dec.step(tokens.data() + t, 1);
    INFO("decoded position " << t);
    REQUIRE(dec.position() == t + 1);
    CHECK(max_diff(got.data(), full.data() + size_t(t) * Vp, V) < 1e-5);
  }
  CHECK_THROWS_AS(dec.step(tokens.data(), 1), std::length_error);
  // reset(): the cache starts over and gives the same logits again.
  dec.reset();
  got = dec.step(tokens.data(), 3);
  CHECK(max_diff(got.data(), full.data() + size_t(2) * Vp, V) < 1e-5);
}

TEST_CASE("the token sampler: greedy, seeded draws, top-k and top-p") {
  const std::vector<float> logits = {std::log(0.5f), std::log(0.3f), std::log(0.2f), std::log(1e-9f)};
  SECTION("temperature 0 and top_k 1 take the argmax") {
    TokenSampler greedy(SamplingConfig{0.0, 0, 1.0, 1});
    TokenSampler top1(SamplingConfig{1.0, 1, 1.0, 1});
    for (int i = 0; i < 10; ++i) {
      CHECK(greedy.next(logits.data(), 4) == 0);
      CHECK(top1.next(logits.data(), 4) == 0);
    }
  }
  auto frequencies = [&](SamplingConfig c, int n) {
    TokenSampler s(c);
    std::map<int, double> f;
    for (int i = 0; i < n; ++i) f[s.next(logits.data(), 4)] += 1.0 / n;
    return f;
  };
  SECTION("temperature 1 draws by the softmax; the same seed draws the same tokens") {
    auto f = frequencies(SamplingConfig{1.0, 0, 1.0, 42}, 20000);
    CHECK(f[0] == Approx(0.5).margin(0.015));
    CHECK(f[1] == Approx(0.3).margin(0.015));
    CHECK(f[2] == Approx(0.2).margin(0.015));
    TokenSampler a(SamplingConfig{1.0, 0, 1.0, 9}), b(SamplingConfig{1.0, 0, 1.0, 9}), c(SamplingConfig{1.0, 0, 1.0, 10});
    std::vector<int> xa, xb, xc;
    for (int i = 0; i < 64; ++i) xa.push_back(a.next(logits.data(), 4)), xb.push_back(b.next(logits.data(), 4)),
                                xc.push_back(c.next(logits.data(), 4));
    CHECK(xa == xb);
    CHECK(xa != xc);
  }
  SECTION("top_p keeps the smallest set reaching p, renormalised; top_k the k most likely") {
    auto f = frequencies(SamplingConfig{1.0, 0, 0.6, 3}, 20000);  // {0, 1}: 0.5 + 0.3 >= 0.6
    CHECK(f.count(2) == 0);
    CHECK(f[0] == Approx(0.625).margin(0.015));
    auto k = frequencies(SamplingConfig{1.0, 2, 1.0, 3}, 20000);
    CHECK(k.count(2) == 0);
    CHECK(k[1] == Approx(0.375).margin(0.015));
  }
  SECTION("a low temperature sharpens the distribution") {
    auto f = frequencies(SamplingConfig{0.25, 0, 1.0, 5}, 20000);  // p ~ p^4: 0.0625 : 0.0081 : 0.0016
    CHECK(f[0] == Approx(0.0625 / (0.0625 + 0.0081 + 0.0016)).margin(0.015));
  }
  CHECK_THROWS(TokenSampler(SamplingConfig{-1.0, 0, 1.0, 1}));
  CHECK_THROWS(TokenSampler(SamplingConfig{1.0, 0, 0.0, 1}));
}
