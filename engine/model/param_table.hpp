#pragma once
// Every parameter of the model lives in one flat float buffer; this table names the views into
// it. Gradients and optimizer state use the same offsets in their own flat buffers, so that
// parallel/ can bucket, shard and checkpoint them knowing nothing about layers.
#include <cstdint>
#include <string>
#include <vector>

#include "engine/model/gpt_shape.hpp"

namespace loom {

enum class ParamInit { Normal, Ones, Zeros };

struct ParamInfo {
  std::string name;            // global name, e.g. "h.3.attn.qkv.weight"
  std::vector<int64_t> shape;  // e.g. {3C, C}
  size_t offset = 0;           // into the flat buffer, in elements
  size_t numel = 0;
  bool weight_decay = false;   // matrices and embeddings decay; biases and LayerNorm do not
  ParamInit init = ParamInit::Zeros;
  double init_std = 0;         // for ParamInit::Normal
};

class ParamTable {
 public:
  void add(std::string name, std::vector<int64_t> shape, bool decay, ParamInit init, double std = 0);
  const std::vector<ParamInfo>& params() const { return params_; }
  const ParamInfo& find(const std::string& name) const;  // throws std::out_of_range naming it
  size_t total() const { return total_; }

 private:
  std::vector<ParamInfo> params_;
  size_t total_ = 0;
};

// GPT-2 layout, layer-major (wte, wpe, h.0.*, h.1.*, ..., ln_f.*), so that each layer is one
// contiguous range. Init follows GPT-2: N(0, 0.02), residual projections N(0, 0.02/sqrt(2L)),
// biases 0, LayerNorm weight 1. wte has Vp rows; the padding rows start and stay at zero.
ParamTable gpt_param_table(const GptShape& s);

// Fills `host` (table.total() floats) with the initial values, from `seed`. Element i of
// parameter P is a pure function of (seed, P's name, i): any rank can generate any slice of any
// tensor on its own, and every layout starts from the same global weights.
void init_params(const ParamTable& table, const GptShape& s, uint64_t seed, float* host);

}  // namespace loom
