#pragma once
// Generation with a KV cache: the GPT of gpt.hpp run one new token (or a prompt) at a time, each
// block's keys and values kept for the positions already seen, so a step costs O(position)
// attention instead of re-running the whole prefix. Same weights layout (gpt_param_table), same
// tensor-parallel layers (tp_layers.hpp: heads split over the tp group, two all-reduces per
// block) and the same ops as training, except attention, which is the backend's
// attention_cached. Forward only: no gradients, no saved activations, no optimizer.
//
// Memory (this rank): the weights in the compute dtype, the cache 2 * L * B * T * C/tp, and one
// step's activations for up to B*T rows.
#include <cstdint>
#include <vector>

#include "engine/model/gpt_shape.hpp"
#include "engine/model/param_table.hpp"
#include "engine/model/tp_layers.hpp"
#include "kernels/backend.hpp"

namespace loom {

class GptDecoder {
 public:
  // `batch` sequences of up to shape.seq_len positions each (prompt and generated tokens).
  GptDecoder(Backend& be, const GptShape& shape, TensorParallel tp, int batch, DType compute = DType::f32);
  ~GptDecoder();
  GptDecoder(const GptDecoder&) = delete;
  GptDecoder& operator=(const GptDecoder&) = delete;

  const ParamTable& table() const { return table_; }
  const GptShape& shape() const { return shape_; }
  // This rank's parameters: table().total() fp32 values in the table's flat layout.
  void set_params(const float* host);
  // Empties the cache: the next step starts at position 0.
  void reset() { pos_ = 0; }
  int position() const { return pos_; }  // tokens per sequence already in the cache
  // Feeds `n_new` tokens per sequence (host, B x n_new, row-major) at positions [position(),
  // position() + n_new) and returns fp32 logits over the real vocabulary (V, gathered over the
  // tp group, the same on every rank): (B, V) of each sequence's last new position, or with
  // `all_positions` (B, n_new, V). Collective over the tp group. Throws std::length_error past
  // shape.seq_len positions.
  std::vector<float> step(const int32_t* tokens, int n_new, bool all_positions = false);

 private:
  Backend& be_;
  GptShape shape_;
  TensorParallel tp_;
  ParamTable table_;
  int B_;
  DType compute_;
  int pos_ = 0;
  int Ct_, NHt_, Vt_;  // C/tp, NH/tp, Vp/tp
  VocabParallelEmbedding embed_;
  ColumnParallelLinear qkv_, fc_, head_;
  RowParallelLinear attn_proj_, mlp_proj_;
  TypedPtr w_;  // the weights, compute dtype
  std::vector<TypedPtr> kcache_, vcache_;  // per layer (B, T, C/tp)
  int32_t* tokens_ = nullptr;             // (B*T)
  TypedPtr x_, ln_, qkv_buf_, atty_, proj_, fch_, fch_gelu_;  // up to N = B*T rows
  float *mean_ = nullptr, *rstd_ = nullptr;                   // (N)
  TypedPtr gathered_;       // (tp, N, Vp/tp): each rank's logits, all-gathered
  float* gathered_f32_ = nullptr;
  std::vector<void*> owned_;
  TypedPtr alloc_act(size_t n);
};

}  // namespace loom
