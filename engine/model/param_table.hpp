#pragma once
// Every parameter of the model lives in one flat float buffer; this table names the views into
// it. Gradients and optimizer state use the same offsets in their own flat buffers, so that
// parallel/ can bucket, shard and checkpoint them knowing nothing about layers.
//
// Under tensor parallelism each rank's table holds its slice of each global tensor, and says
// where the slice sits in the global tensor (rows and columns), so that initialisation (and
// checkpoints) work in global coordinates.
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "engine/model/gpt_shape.hpp"

namespace loom {

enum class ParamInit { Normal, Ones, Zeros };

// How a tensor is divided over the tp group.
enum class TpSplit {
  Replicated,  // every rank holds all of it (LayerNorms, wpe, row-parallel biases)
  Rows,        // column-parallel weights and their biases, and the vocab-parallel embedding
  Cols,        // row-parallel weights: the input dimension is split
};

struct ParamInfo {
  std::string name;                   // global name, e.g. "h.3.attn.qkv.weight"
  std::vector<int64_t> shape;         // this rank's slice, e.g. {3C/tp, C}
  std::vector<int64_t> global_shape;  // e.g. {3C, C}; 1-D tensors are {n}
  // Rows of the global tensor this slice holds, as (first global row, count) runs in slice order
  // (qkv has three runs: its q, k and v parts), and the first global column it holds.
  std::vector<std::pair<int64_t, int64_t>> row_runs;
  int64_t col_begin = 0;
  TpSplit split = TpSplit::Replicated;
  size_t offset = 0;           // into the flat buffer, in elements
  size_t numel = 0;
  bool weight_decay = false;   // matrices and embeddings decay; biases and LayerNorm do not
  ParamInit init = ParamInit::Zeros;
  double init_std = 0;         // for ParamInit::Normal
  int layer = -1;              // the block (global index) this tensor belongs to; -1: embedding, ln_f
  // Tied embedding (wte is both the token embedding and the LM head). When the first and last
  // pipeline stages differ, each holds a copy of wte and both copies are `tied`: their gradients
  // must be summed over the embedding group (first and last stage) so they stay identical. The
  // last stage's copy is also `tied_copy`: the first stage's copy counts in the gradient norm and
  // is the one written to checkpoints. With pp = 1 (a stage both first and last) neither is set.
  bool tied = false;
  bool tied_copy = false;

  int64_t cols() const { return shape.size() > 1 ? shape[1] : 1; }
  int64_t global_cols() const { return global_shape.size() > 1 ? global_shape[1] : 1; }
  // Global row-major index of local element i.
  int64_t global_index(size_t i) const;
};

class ParamTable {
 public:
  void add(ParamInfo p);
  const std::vector<ParamInfo>& params() const { return params_; }
  const ParamInfo& find(const std::string& name) const;  // throws std::out_of_range naming it
  // Null if this rank's table does not hold `name` (another pipeline stage does).
  const ParamInfo* find_if_held(const std::string& name) const;
  size_t total() const { return total_; }
  // The flat range [begin, end) of block `layer` (global index): its tensors are contiguous.
  // Throws std::out_of_range if this table (this pipeline stage) does not hold the layer.
  std::pair<size_t, size_t> layer_range(int layer) const;

 private:
  std::vector<ParamInfo> params_;
  size_t total_ = 0;
};

// A contiguous range of the flat buffer that ZeRO-3 gathers and ZeRO-2/3 reduce as one piece
// (FSDP's unit): the embedding (wte and wpe on a first stage; a last stage's wte copy), each block,
// the final LayerNorm. Consecutive tensors with the same ParamInfo::layer form one unit.
struct ParamUnit {
  enum Kind { Embedding, Block, Final };
  Kind kind = Block;
  int layer = -1;  // Block: the global layer index
  size_t begin = 0, end = 0;
  size_t size() const { return end - begin; }
};
// The units of `table`, in flat order (they tile [0, table.total())).
std::vector<ParamUnit> param_units(const ParamTable& table);

// Which of the model's tensors a table holds. Without LoRA every tensor trains and the frozen set
// is empty. With LoRA (GptShape::lora) the trainable set is the adapters ("h.L.attn.qkv.lora_a",
// "...lora_b", likewise attn.proj, mlp.fc, mlp.proj), plus the embeddings and/or LayerNorms if
// they train; the frozen set is the rest of the base model.
enum class ParamSet { Trainable, Frozen };

// GPT-2 layout, layer-major (wte, wpe, h.0.*, h.1.*, ..., ln_f.*), so that each layer is one
// contiguous range; for rank `tp_rank` of `tp` (Megatron's column/row-parallel split, and the
// vocab-parallel embedding). Init follows GPT-2: N(0, 0.02), residual projections
// N(0, 0.02/sqrt(2L)), biases 0, LayerNorm weight 1. wte has Vp rows; padding rows are zero.
// A pipeline stage's table holds only its part (StageSpec); names and ParamInfo::layer keep global
// layer numbers, and wte is marked tied / tied_copy when the first and last stages differ.
// With LoRA, the adapters of a column-parallel layer (qkv, mlp.fc) are A (rank, C) replicated and
// B (OC, rank) split by rows like the weight; of a row-parallel layer (the projections) A
// (rank, C) split by columns like the weight and B (OC, rank) replicated. A is initialised
// N(0, 1/(3C)) (the spread of PyTorch's default Linear init), B zero.
ParamTable gpt_param_table(const GptShape& s, int tp_rank = 0, int tp = 1, StageSpec stage = {},
                           ParamSet which = ParamSet::Trainable);
// Whether tensor `name` is a LoRA adapter (its name ends in ".lora_a" or ".lora_b").
bool is_lora_adapter(const std::string& name);

// Fills `host` (table.total() floats) with the initial values, from `seed`. Element (i, j) of
// global tensor P is a pure function of (seed, P's name, i * cols + j): any rank generates its
// own slice alone, and every layout starts from the same global weights.
void init_params(const ParamTable& table, const GptShape& s, uint64_t seed, float* host);
// One tensor of it into `dst` (p.numel floats): the same values init_params writes there.
void init_param(const ParamInfo& p, const GptShape& s, uint64_t seed, float* dst);

}  // namespace loom
