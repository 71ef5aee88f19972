#pragma once
// How many bytes of activations the model allocates on a rank, as a pure function of the shape,
// layout and compute dtype: what `loom plan` predicts memory from. Gpt's constructor checks that
// what it really allocated equals this (so the two cannot drift apart).
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "engine/model/gpt_shape.hpp"
#include "kernels/backend.hpp"

namespace loom {

// Activation recomputation (train.recompute): what the backward pass recomputes instead of
// keeping from the forward pass.
//   None      every block's activations kept for each micro-batch in flight;
//   Selective attention's saved state (on the CPU the B*NH*T*T probabilities, the largest part)
//             recomputed from the kept q|k|v, one shared buffer per rank (Megatron's selective);
//   Full      only each block's output (the residual stream) kept; the whole block is re-run
//             before its backward into one shared set of buffers.
enum class Recompute { None, Selective, Full };

// train.recompute's value ("none", "selective", "full"; validated with the recipe).
inline Recompute recompute_from_name(const std::string& name) {
  return name == "full" ? Recompute::Full : name == "selective" ? Recompute::Selective : Recompute::None;
}

// One rank's activation memory, in bytes. Activations and their gradients are in the compute
// dtype (train.precision); LayerNorm statistics, losses and the cross-entropy's partial sums are
// fp32 whatever it is; attention's saved state is whatever the backend says.
struct GptActivationBytes {
  size_t per_slot = 0;  // one micro-batch's saved activations (a pipeline stage keeps `slots`)
  size_t shared = 0;    // gradient scratch and loss buffers, one set per rank
  size_t ints = 0;      // token and target ids (int32), all slots
  size_t total(int slots) const { return per_slot * size_t(slots) + shared; }
};

// `attention_saved_bytes` is the backend's attention_saved_bytes(B, T, NH / tp, compute) (CPU:
// the softmax probabilities B*NH*T*T in the compute dtype; CUDA: the log-sum-exp, B*NH*T fp32).
// `act` is the compute dtype's size (4 for fp32, 2 for bf16/fp16).
inline GptActivationBytes gpt_activation_bytes(const GptShape& s, int micro_batch, int tp, int stage_layers,
                                               bool last_stage, int slots, size_t attention_saved_bytes, size_t act,
                                               Recompute recompute = Recompute::None) {
  const size_t N = size_t(micro_batch) * s.seq_len, C = size_t(s.d_model), Ct = C / size_t(tp);
  const size_t Vt = size_t(s.vocab_pad) / size_t(tp);
  constexpr size_t f32 = 4;
  GptActivationBytes a;
  const size_t stats = 2 * N * f32;  // a LayerNorm's mean and rstd
  // LoRA: each target keeps its (N, r) low-rank activation; one (N, r) gradient and one
  // (N, max(C, 4C/tp)) scratch per rank.
  const LoraSpec& lora = s.lora;
  const size_t targets = lora.on() ? size_t(lora.qkv) + lora.attn_proj + lora.fc + lora.mlp_proj : 0;
  const size_t lora_kept = act * targets * N * size_t(lora.rank);
  const size_t lora_shared = targets ? act * (N * size_t(lora.rank) + N * std::max(C, 4 * Ct)) : 0;
  const size_t per_layer = act * (N * C /*ln1*/ + N * 3 * Ct /*qkv*/ + N * Ct /*atty*/ + N * C /*res2*/ +
                                  N * C /*ln2*/ + N * 4 * Ct /*fch*/ + N * 4 * Ct /*gelu*/ + N * C /*res3*/) +
                           2 * stats + attention_saved_bytes + lora_kept;
  size_t kept_per_layer = per_layer, shared_layer = 0;
  if (recompute == Recompute::Selective) {
    kept_per_layer -= attention_saved_bytes;
    shared_layer = attention_saved_bytes;
  } else if (recompute == Recompute::Full) {
    kept_per_layer = act * N * C;            // res3 only
    shared_layer = per_layer - act * N * C;  // one block's buffers, re-filled before each backward
  }
  a.per_slot = act * N * C /*input*/ + size_t(stage_layers) * kept_per_layer;
  if (last_stage) a.per_slot += act * N * C /*lnf*/ + stats + act * N * Vt /*logits*/;
  a.shared = f32 * (N /*losses*/ + N /*ce max*/ + 2 * N /*ce partials*/) +
             act * (N * C /*proj scratch*/ + 3 * N * C /*dresidual, dln, dout*/ + N * Ct /*datty*/ +
                    N * 3 * Ct /*dqkv*/ + N * 4 * Ct /*dfch*/) +
             (stage_layers > 0 ? shared_layer + lora_shared : 0);
  a.ints = 4 * 2 * N * size_t(slots);
  return a;
}

// The ops one rank of the model runs, as the CPU backend's scratch estimate takes them
// (cpu_scratch_bytes in kernels/backend.hpp): the block's four linear layers as tp cuts them,
// LoRA's adapters, the tied LM head on the last stage, attention over the rank's heads.
inline CpuScratchShapes gpt_cpu_scratch_shapes(const GptShape& s, int micro_batch, int tp, int stage_layers,
                                               bool last_stage, DType compute, int threads) {
  const int C = s.d_model, Ct = C / tp;
  CpuScratchShapes o;
  o.compute = compute;
  o.threads = threads;
  o.rows = micro_batch * s.seq_len;
  o.width = C;
  if (stage_layers > 0) {
    o.linears = {{C, 3 * Ct}, {Ct, C}, {C, 4 * Ct}, {4 * Ct, C}};  // qkv, attn.proj, mlp.fc, mlp.proj
    if (s.lora.on())
      for (const CpuLinearShape base : std::vector<CpuLinearShape>(o.linears)) {
        o.linears.push_back({base.in, s.lora.rank, false, true});
        o.linears.push_back({s.lora.rank, base.out, false, true});
      }
    o.batch = micro_batch, o.seq = s.seq_len, o.heads = s.n_head / tp, o.attention_width = Ct;
  }
  if (last_stage) {
    o.linears.push_back({C, s.vocab_pad / tp, false, true});
    o.logits_row = s.vocab_pad / tp;
  }
  return o;
}

class ParamTable;

// Backend bytes of a LoRA run's frozen base on one rank (`frozen`: gpt_param_table's
// ParamSet::Frozen for that rank): dense tensors in the compute dtype (`act` bytes each) or, with
// QLoRA (lora.quantize), the blocks' linear weights as codes and fp32 scales, plus one
// dequantization scratch as wide as the widest block. Gpt::alloc_frozen checks its allocations
// against it. Defined in gpt_frozen.cpp.
size_t gpt_frozen_bytes(const ParamTable& frozen, const LoraSpec& lora, size_t act);

// What Gpt::set_frozen holds while the base goes in, a tensor at a time (elements): an fp32
// host buffer as wide as the widest frozen tensor, and, when the compute dtype is 16-bit, an
// fp32 backend buffer as wide as the widest dense one (uploaded, then converted into place).
// set_frozen sizes its buffers from it; `loom plan` counts them. Defined in gpt_frozen.cpp.
struct FrozenLoadElems {
  size_t host = 0, backend = 0;
};
FrozenLoadElems gpt_frozen_load_elems(const ParamTable& frozen, const LoraSpec& lora, bool compute16);

}  // namespace loom
