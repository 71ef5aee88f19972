#include "engine/model/param_table.hpp"
#include "engine/util/splitmix64.hpp"

#include <algorithm>
#include <climits>
#include <cmath>
#include <stdexcept>

namespace loom {

int64_t ParamInfo::global_index(size_t i) const {
  const int64_t c = cols();
  int64_t row = int64_t(i) / c;
  const int64_t col = int64_t(i) % c;
  for (const auto& [first, count] : row_runs) {
    if (row < count) return (first + row) * global_cols() + col_begin + col;
    row -= count;
  }
  throw std::out_of_range(name + ": local element " + std::to_string(i) + " is outside the slice");
}

void ParamTable::add(ParamInfo p) {
  p.numel = 1;
  for (int64_t d : p.shape) p.numel *= static_cast<size_t>(d);
  if (p.global_shape.empty()) p.global_shape = p.shape;
  if (p.row_runs.empty()) p.row_runs = {{0, p.shape[0]}};
  p.offset = total_;
  total_ += p.numel;
  params_.push_back(std::move(p));
}

const ParamInfo* ParamTable::find_if_held(const std::string& name) const {
  for (const auto& p : params_)
    if (p.name == name) return &p;
  return nullptr;
}

const ParamInfo& ParamTable::find(const std::string& name) const {
  if (const ParamInfo* p = find_if_held(name)) return *p;
  throw std::out_of_range("no parameter named '" + name + "'");
}

std::pair<size_t, size_t> ParamTable::layer_range(int layer) const {
  size_t begin = total_, end = 0;
  for (const auto& p : params_)
    if (p.layer == layer && layer >= 0) begin = std::min(begin, p.offset), end = std::max(end, p.offset + p.numel);
  if (begin >= end) throw std::out_of_range("this stage holds no layer " + std::to_string(layer));
  return {begin, end};
}

std::vector<ParamUnit> param_units(const ParamTable& table) {
  std::vector<ParamUnit> units;
  for (const ParamInfo& p : table.params()) {
    // Outside the blocks: the final LayerNorm (ln_f.*) or the embedding (wte, wpe).
    const ParamUnit::Kind kind = p.layer >= 0                     ? ParamUnit::Block
                                 : p.name.rfind("ln_f.", 0) == 0 ? ParamUnit::Final
                                                                  : ParamUnit::Embedding;
    if (units.empty() || units.back().layer != p.layer || units.back().kind != kind) {
      ParamUnit u;
      u.layer = p.layer;
      u.kind = kind;
      u.begin = u.end = p.offset;
      units.push_back(u);
    }
    units.back().end = p.offset + p.numel;
  }
  return units;
}

bool is_lora_adapter(const std::string& name) {
  auto ends = [&](const char* suffix) {
    const size_t n = std::char_traits<char>::length(suffix);
    return name.size() >= n && name.compare(name.size() - n, n, suffix) == 0;
  };
  return ends(".lora_a") || ends(".lora_b");
}

ParamTable gpt_param_table(const GptShape& s, int r, int tp, StageSpec stage, ParamSet which) {
  if (stage.n_layers < 0) stage.n_layers = s.n_layer;
  const LoraSpec& lora = s.lora;
  // Whether a tensor of the base model belongs to the set asked for (adapters: always trainable).
  auto wanted = [&](const std::string& name) {
    bool trainable = true;
    if (lora.on()) {
      const bool embedding = name == "wte" || name == "wpe";
      const bool layernorm = name.find(".ln1.") != std::string::npos || name.find(".ln2.") != std::string::npos ||
                             name.rfind("ln_f.", 0) == 0;
      trainable = is_lora_adapter(name) || (embedding && lora.train_embeddings) || (layernorm && lora.train_layernorm);
    }
    return trainable == (which == ParamSet::Trainable);
  };
  const int64_t C = s.d_model, Vt = s.vocab_pad / tp;
  const double std = 0.02, proj_std = 0.02 / std::sqrt(2.0 * s.n_layer);
  using N = ParamInit;
  const int64_t R = lora.rank;
  auto a_std = [](int64_t in) { return 1.0 / std::sqrt(3.0 * double(in)); };
  ParamTable t;
  int layer = -1;  // the block being added, -1 outside the blocks
  auto replicated = [&](std::string name, std::vector<int64_t> shape, bool decay, N init, double sd = 0) {
    if (!wanted(name)) return;
    ParamInfo p;
    p.name = std::move(name);
    p.shape = std::move(shape);
    p.weight_decay = decay;
    p.init = init;
    p.init_std = sd;
    p.layer = layer;
    t.add(std::move(p));
  };
  // Column-parallel: output rows split; `parts` equal blocks of `block` rows each (qkv: 3).
  auto rows = [&](std::string name, int64_t block, int parts, int64_t cols, bool decay, N init, double sd = 0) {
    if (!wanted(name)) return;
    ParamInfo p;
    p.name = std::move(name);
    p.split = TpSplit::Rows;
    const int64_t mine = block / tp;
    for (int k = 0; k < parts; ++k) p.row_runs.push_back({k * block + r * mine, mine});
    p.shape = cols > 0 ? std::vector<int64_t>{mine * parts, cols} : std::vector<int64_t>{mine * parts};
    p.global_shape = cols > 0 ? std::vector<int64_t>{block * parts, cols} : std::vector<int64_t>{block * parts};
    p.weight_decay = decay;
    p.init = init;
    p.init_std = sd;
    p.layer = layer;
    t.add(std::move(p));
  };
  // Row-parallel: input columns split.
  auto cols = [&](std::string name, int64_t out, int64_t in, double sd) {
    if (!wanted(name)) return;
    ParamInfo p;
    p.name = std::move(name);
    p.split = TpSplit::Cols;
    p.shape = {out, in / tp};
    p.global_shape = {out, in};
    p.col_begin = r * (in / tp);
    p.weight_decay = true;
    p.init = N::Normal;
    p.init_std = sd;
    p.layer = layer;
    t.add(std::move(p));
  };
  // The first stage embeds, the last stage's head is tied to the same wte: both hold a copy,
  // which are two tied copies when they are different stages.
  if ((stage.first || stage.last) && wanted("wte")) {
    ParamInfo wte;  // vocab-parallel: rank r holds vocabulary rows [r*Vp/tp, (r+1)*Vp/tp)
    wte.name = "wte";
    wte.split = tp > 1 ? TpSplit::Rows : TpSplit::Replicated;
    wte.shape = {Vt, C};
    wte.global_shape = {s.vocab_pad, C};
    wte.row_runs = {{r * Vt, Vt}};
    wte.weight_decay = true;
    wte.init = N::Normal;
    wte.init_std = std;
    wte.tied = !(stage.first && stage.last);
    wte.tied_copy = wte.tied && !stage.first;
    t.add(std::move(wte));
  }
  if (stage.first) replicated("wpe", {s.seq_len, C}, true, N::Normal, std);
  for (int l = stage.first_layer; l < stage.first_layer + stage.n_layers; ++l) {
    const std::string h = "h." + std::to_string(l) + ".";
    layer = l;
    replicated(h + "ln1.weight", {C}, false, N::Ones);
    replicated(h + "ln1.bias", {C}, false, N::Zeros);
    rows(h + "attn.qkv.weight", C, 3, C, true, N::Normal, std);  // q | k | v, heads split
    rows(h + "attn.qkv.bias", C, 3, 0, false, N::Zeros);
    if (lora.on() && lora.qkv) {
      replicated(h + "attn.qkv.lora_a", {R, C}, true, N::Normal, a_std(C));
      rows(h + "attn.qkv.lora_b", C, 3, R, true, N::Zeros);
    }
    cols(h + "attn.proj.weight", C, C, proj_std);
    replicated(h + "attn.proj.bias", {C}, false, N::Zeros);
    if (lora.on() && lora.attn_proj) {
      cols(h + "attn.proj.lora_a", R, C, a_std(C));
      replicated(h + "attn.proj.lora_b", {C, R}, true, N::Zeros);
    }
    replicated(h + "ln2.weight", {C}, false, N::Ones);
    replicated(h + "ln2.bias", {C}, false, N::Zeros);
    rows(h + "mlp.fc.weight", 4 * C, 1, C, true, N::Normal, std);
    rows(h + "mlp.fc.bias", 4 * C, 1, 0, false, N::Zeros);
    if (lora.on() && lora.fc) {
      replicated(h + "mlp.fc.lora_a", {R, C}, true, N::Normal, a_std(C));
      rows(h + "mlp.fc.lora_b", 4 * C, 1, R, true, N::Zeros);
    }
    cols(h + "mlp.proj.weight", C, 4 * C, proj_std);
    replicated(h + "mlp.proj.bias", {C}, false, N::Zeros);
    if (lora.on() && lora.mlp_proj) {
      cols(h + "mlp.proj.lora_a", R, 4 * C, a_std(4 * C));
      replicated(h + "mlp.proj.lora_b", {C, R}, true, N::Zeros);
    }
  }
  layer = -1;
  if (stage.last) {
    replicated("ln_f.weight", {C}, false, N::Ones);
    replicated("ln_f.bias", {C}, false, N::Zeros);
  }
  return t;
}

namespace {

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

void init_param(const ParamInfo& p, const GptShape& s, uint64_t seed, float* dst) {
  switch (p.init) {
    case ParamInit::Ones:
      for (size_t i = 0; i < p.numel; ++i) dst[i] = 1.0f;
      break;
    case ParamInit::Zeros:
      for (size_t i = 0; i < p.numel; ++i) dst[i] = 0.0f;
      break;
    case ParamInit::Normal: {
      const uint64_t key = splitmix64(seed) ^ fnv1a(p.name);
      // Rows of wte past the real vocabulary (padding) stay zero: never looked up, no gradient.
      const int64_t real_end = p.name == "wte" ? int64_t(s.vocab) * s.d_model : INT64_MAX;
#pragma omp parallel for schedule(static)
      for (size_t i = 0; i < p.numel; ++i) {
        const int64_t g = p.global_index(i);
        dst[i] = g < real_end ? static_cast<float>(p.init_std * counter_normal(key, uint64_t(g))) : 0.0f;
      }
      break;
    }
  }
}

void init_params(const ParamTable& table, const GptShape& s, uint64_t seed, float* host) {
  for (const auto& p : table.params()) init_param(p, s, seed, host + p.offset);
}

}  // namespace loom
