#include "engine/model/param_table.hpp"

#include <cmath>
#include <stdexcept>

namespace loom {

void ParamTable::add(std::string name, std::vector<int64_t> shape, bool decay, ParamInit init, double std) {
  ParamInfo p;
  p.name = std::move(name);
  p.shape = std::move(shape);
  p.numel = 1;
  for (int64_t d : p.shape) p.numel *= static_cast<size_t>(d);
  p.offset = total_;
  p.weight_decay = decay;
  p.init = init;
  p.init_std = std;
  total_ += p.numel;
  params_.push_back(std::move(p));
}

const ParamInfo& ParamTable::find(const std::string& name) const {
  for (const auto& p : params_)
    if (p.name == name) return p;
  throw std::out_of_range("no parameter named '" + name + "'");
}

ParamTable gpt_param_table(const GptShape& s) {
  const int64_t C = s.d_model;
  const double std = 0.02, proj_std = 0.02 / std::sqrt(2.0 * s.n_layer);
  ParamTable t;
  t.add("wte", {s.vocab_pad, C}, true, ParamInit::Normal, std);
  t.add("wpe", {s.seq_len, C}, true, ParamInit::Normal, std);
  for (int l = 0; l < s.n_layer; ++l) {
    const std::string h = "h." + std::to_string(l) + ".";
    t.add(h + "ln1.weight", {C}, false, ParamInit::Ones);
    t.add(h + "ln1.bias", {C}, false, ParamInit::Zeros);
    t.add(h + "attn.qkv.weight", {3 * C, C}, true, ParamInit::Normal, std);
    t.add(h + "attn.qkv.bias", {3 * C}, false, ParamInit::Zeros);
    t.add(h + "attn.proj.weight", {C, C}, true, ParamInit::Normal, proj_std);
    t.add(h + "attn.proj.bias", {C}, false, ParamInit::Zeros);
    t.add(h + "ln2.weight", {C}, false, ParamInit::Ones);
    t.add(h + "ln2.bias", {C}, false, ParamInit::Zeros);
    t.add(h + "mlp.fc.weight", {4 * C, C}, true, ParamInit::Normal, std);
    t.add(h + "mlp.fc.bias", {4 * C}, false, ParamInit::Zeros);
    t.add(h + "mlp.proj.weight", {C, 4 * C}, true, ParamInit::Normal, proj_std);
    t.add(h + "mlp.proj.bias", {C}, false, ParamInit::Zeros);
  }
  t.add("ln_f.weight", {C}, false, ParamInit::Ones);
  t.add("ln_f.bias", {C}, false, ParamInit::Zeros);
  return t;
}

namespace {

uint64_t splitmix64(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

uint64_t fnv1a(const std::string& s) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (unsigned char c : s) h = (h ^ c) * 0x100000001b3ull;
  return h;
}

// Standard normal for counter i of stream `key` (Box-Muller on two 53-bit uniforms).
double counter_normal(uint64_t key, uint64_t i) {
  const double u1 = ((splitmix64(key ^ splitmix64(2 * i)) >> 11) + 1) * 0x1.0p-53;  // (0, 1]
  const double u2 = (splitmix64(key ^ splitmix64(2 * i + 1)) >> 11) * 0x1.0p-53;    // [0, 1)
  return std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2);
}

}  // namespace

void init_params(const ParamTable& table, const GptShape& s, uint64_t seed, float* host) {
  for (const auto& p : table.params()) {
    float* dst = host + p.offset;
    switch (p.init) {
      case ParamInit::Ones:
        for (size_t i = 0; i < p.numel; ++i) dst[i] = 1.0f;
        break;
      case ParamInit::Zeros:
        for (size_t i = 0; i < p.numel; ++i) dst[i] = 0.0f;
        break;
      case ParamInit::Normal: {
        const uint64_t key = splitmix64(seed) ^ fnv1a(p.name);
        size_t n = p.numel;
        // Vocab padding rows of wte stay zero: they are never looked up and get no gradient.
        if (p.name == "wte") n = static_cast<size_t>(s.vocab) * s.d_model;
#pragma omp parallel for schedule(static)
        for (size_t i = 0; i < n; ++i) dst[i] = static_cast<float>(p.init_std * counter_normal(key, i));
        for (size_t i = n; i < p.numel; ++i) dst[i] = 0.0f;
        break;
      }
    }
  }
}

}  // namespace loom
