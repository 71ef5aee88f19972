#pragma once
// One GPT-2 block, pre-LayerNorm, built from the tensor-parallel layers of tp_layers.hpp:
//
//   res2 = x    + attn.proj( attention( attn.qkv( ln1(x) ) ) )      qkv: column, proj: row
//   res3 = res2 + mlp.proj( gelu( mlp.fc( ln2(res2) ) ) )           fc: column, proj: row
//
// so with tensor parallelism each block does one all-reduce after each row-parallel forward (g)
// and one on the input gradient of each column-parallel backward (f): two forward, two
// backward. Attention runs on this rank's NH/tp heads. The residual stream (N,C) is replicated
// over the tp group. Shapes marked /tp are per rank; N = B*T.
//
// The block holds no memory: weights, saved activations and scratch are views the model owns.
#include <functional>
#include <string>

#include "engine/model/gpt_shape.hpp"
#include "engine/model/param_table.hpp"
#include "engine/model/tp_layers.hpp"
#include "kernels/backend.hpp"

namespace loom {

// Views of block `layer`'s tensors in a flat buffer laid out by a ParamTable: P is TypedPtr for
// the weights the ops read (the compute-dtype copy: BlockWeights) and float* for the gradients,
// which are fp32 at the same offsets (BlockGrads).
template <typename P>
struct BlockTensors {
  P ln1_w, ln1_b;              // (C), (C)
  P qkv_w, qkv_b;              // (3C/tp, C), (3C/tp): this rank's heads' q | k | v rows
  P attn_proj_w, attn_proj_b;  // (C, C/tp), (C)
  P ln2_w, ln2_b;              // (C), (C)
  P fc_w, fc_b;                // (4C/tp, C), (4C/tp)
  P mlp_proj_w, mlp_proj_b;    // (C, 4C/tp), (C)
  // LoRA adapters (null where the layer has none): A ("la") and B ("lb") of each target.
  P qkv_la, qkv_lb;              // (r, C), (3C/tp, r)
  P attn_proj_la, attn_proj_lb;  // (r, C/tp), (C, r)
  P fc_la, fc_lb;                // (r, C), (4C/tp, r)
  P mlp_proj_la, mlp_proj_lb;    // (r, 4C/tp), (C, r)
  // `base` addresses flat element `base_offset` (a unit's buffer: its first offset; 0: the whole
  // buffer); tensors `table` does not hold (adapters of a model without them) are null.
  static BlockTensors at(const ParamTable& table, P base, int layer, size_t base_offset = 0);
  // Each tensor from `find(full name)` (null where there is none): weights split between a
  // trainable and a frozen buffer, gradients only for the trainable ones.
  static BlockTensors lookup(int layer, const std::function<P(const std::string&)>& find);
};
using BlockWeights = BlockTensors<TypedPtr>;
using BlockGrads = BlockTensors<float*>;

// What a block's forward writes and its backward reads (each (N,C) unless noted): activations in
// the compute dtype, LayerNorm statistics in fp32.
struct BlockActs {
  TypedPtr ln1;                  // (N,C)
  float *ln1_mean, *ln1_rstd;    // (N) each
  TypedPtr qkv;                  // (N,3C/tp): this rank's heads' q | k | v
  TypedPtr atty;                 // (N,C/tp)
  void* att;                     // attention's saved state: Backend::attention_saved_bytes
  TypedPtr res2;                 // x + attn(ln1(x))
  TypedPtr ln2;
  float *ln2_mean, *ln2_rstd;
  TypedPtr fch, fch_gelu;        // (N,4C/tp) each
  TypedPtr res3;                 // block output = next block's input
  // LoRA: each target's scaled low-rank activation us = scale * (x A^T), (N, r); null if none.
  TypedPtr qkv_us, attn_proj_us, fc_us, mlp_proj_us;
};

// Gradient scratch shared by all blocks of a rank, in the compute dtype.
struct BlockGradScratch {
  TypedPtr dln;    // (N,C): d(LayerNorm output), all-reduced by the column-parallel backward
  TypedPtr datty;  // (N,C/tp)
  TypedPtr dqkv;   // (N,3C/tp)
  TypedPtr dfch;   // (N,4C/tp)
  // LoRA (null without adapters): the low-rank gradient (N, r) and a (N, max(C, 4C/tp)) scratch.
  TypedPtr lora_du, lora_wide;
};

class GptBlock {
 public:
  GptBlock(Backend& be, TensorParallel tp, const GptShape& shape, int micro_batch);
  // LoRA's forward needs a scratch of (N, max(C, 4C/tp)) for the branch's output: the model's.
  void set_lora_scratch(TypedPtr wide) { lora_wide_ = wide; }
  // x (N,C) -> a.res3, filling a's buffers. `proj` (N,C) is scratch for the projections' outputs.
  // `dropout_seed` != 0: LoRA dropout on the adapters' inputs with masks from it (backward must
  // get the same seed).
  void forward(const BlockWeights& w, ConstTypedPtr x, const BlockActs& a, TypedPtr proj, uint64_t dropout_seed = 0) const;
  // Selective recompute: attention's saved state a.att again, from the kept a.qkv (its output,
  // identical to a.atty, goes to `scratch` (N,C/tp) and is dropped).
  void recompute_attention(const BlockActs& a, TypedPtr scratch) const;
  // dresidual (N,C) holds dL/d(res3) on entry and dL/dx on return (each LayerNorm backward adds
  // its branch as the stream passes its fork). Parameter gradients accumulate into dw.
  void backward(TypedPtr dresidual, const BlockWeights& w, const BlockGrads& dw, ConstTypedPtr x, const BlockActs& a,
                const BlockGradScratch& s, uint64_t dropout_seed = 0) const;

 private:
  Backend& be_;
  int B_, T_, C_, Ct_, NHt_;  // Ct_ = C/tp, NHt_ = NH/tp
  ColumnParallelLinear qkv_, fc_;
  RowParallelLinear attn_proj_, mlp_proj_;
  LoraColumn qkv_lora_, fc_lora_;
  LoraRow attn_proj_lora_, mlp_proj_lora_;
  TypedPtr lora_wide_;
};

}  // namespace loom
