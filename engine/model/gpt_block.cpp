#include "engine/model/gpt_block.hpp"

#include <string>

namespace loom {

template <typename P>
BlockTensors<P> BlockTensors<P>::lookup(int layer, const std::function<P(const std::string&)>& find) {
  const std::string h = "h." + std::to_string(layer) + ".";
  auto at = [&](const char* n) { return find(h + n); };
  return {at("ln1.weight"),         at("ln1.bias"),          at("attn.qkv.weight"),    at("attn.qkv.bias"),
          at("attn.proj.weight"),   at("attn.proj.bias"),    at("ln2.weight"),         at("ln2.bias"),
          at("mlp.fc.weight"),      at("mlp.fc.bias"),       at("mlp.proj.weight"),    at("mlp.proj.bias"),
          at("attn.qkv.lora_a"),    at("attn.qkv.lora_b"),   at("attn.proj.lora_a"),   at("attn.proj.lora_b"),
          at("mlp.fc.lora_a"),      at("mlp.fc.lora_b"),     at("mlp.proj.lora_a"),    at("mlp.proj.lora_b")};
}

template <typename P>
BlockTensors<P> BlockTensors<P>::at(const ParamTable& table, P base, int layer, size_t base_offset) {
  return lookup(layer, [&](const std::string& name) {
    const ParamInfo* p = table.find_if_held(name);
    return p ? base + (p->offset - base_offset) : P();
  });
}
template struct BlockTensors<TypedPtr>;
template struct BlockTensors<float*>;

GptBlock::GptBlock(Backend& be, TensorParallel tp, const GptShape& shape, int micro_batch)
    : be_(be),
      B_(micro_batch),
      T_(shape.seq_len),
      C_(shape.d_model),
      Ct_(shape.d_model / tp.size),
      NHt_(shape.n_head / tp.size),
      qkv_(be, tp, C_, 3 * Ct_),
      fc_(be, tp, C_, 4 * Ct_),
      attn_proj_(be, tp, Ct_, C_),
      mlp_proj_(be, tp, 4 * Ct_, C_),
      qkv_lora_(be, tp, C_, 3 * Ct_, shape.lora.rank, float(shape.lora.scale()), shape.lora.dropout),
      fc_lora_(be, tp, C_, 4 * Ct_, shape.lora.rank, float(shape.lora.scale()), shape.lora.dropout),
      attn_proj_lora_(be, tp, Ct_, C_, shape.lora.rank, float(shape.lora.scale()), shape.lora.dropout),
      mlp_proj_lora_(be, tp, 4 * Ct_, C_, shape.lora.rank, float(shape.lora.scale()), shape.lora.dropout) {}

namespace {
// Each target's own mask: the block's seed mixed with the target's number (0 stays 0: no dropout).
uint64_t target_seed(uint64_t block_seed, int target) {
  return block_seed ? block_seed ^ (0xD1B54A32D192ED03ull * uint64_t(target + 1)) : 0;
}
}  // namespace

void GptBlock::forward(const BlockWeights& w, ConstTypedPtr x, const BlockActs& a, TypedPtr proj, uint64_t seed) const {
  const int N = B_ * T_;
  const size_t NC = size_t(N) * C_;
  be_.layernorm_forward(a.ln1, a.ln1_mean, a.ln1_rstd, x, w.ln1_w, w.ln1_b, N, C_);
  qkv_.forward(a.qkv, a.ln1, w.qkv_w, w.qkv_b, N);
  if (w.qkv_la) qkv_lora_.forward(a.qkv, a.qkv_us, a.ln1, w.qkv_la, w.qkv_lb, lora_wide_, N, target_seed(seed, 0));
  be_.attention_forward(a.atty, a.att, a.qkv, B_, T_, Ct_, NHt_);
  attn_proj_.forward(proj, a.atty, w.attn_proj_w, w.attn_proj_b, N);
  if (w.attn_proj_la)
    attn_proj_lora_.forward(proj, a.attn_proj_us, a.atty, w.attn_proj_la, w.attn_proj_lb, lora_wide_, N,
                            target_seed(seed, 1));
  be_.residual_forward(a.res2, x, proj, NC);
  be_.layernorm_forward(a.ln2, a.ln2_mean, a.ln2_rstd, a.res2, w.ln2_w, w.ln2_b, N, C_);
  if (w.fc_la) {  // the adapter adds to the layer's output before the GELU
    fc_.forward(a.fch, a.ln2, w.fc_w, w.fc_b, N);
    fc_lora_.forward(a.fch, a.fc_us, a.ln2, w.fc_la, w.fc_lb, lora_wide_, N, target_seed(seed, 2));
    be_.gelu_forward(a.fch_gelu, a.fch, size_t(N) * 4 * Ct_);
  } else {
    fc_.forward_gelu(a.fch_gelu, a.fch, a.ln2, w.fc_w, w.fc_b, N);
  }
  mlp_proj_.forward(proj, a.fch_gelu, w.mlp_proj_w, w.mlp_proj_b, N);
  if (w.mlp_proj_la)
    mlp_proj_lora_.forward(proj, a.mlp_proj_us, a.fch_gelu, w.mlp_proj_la, w.mlp_proj_lb, lora_wide_, N,
                           target_seed(seed, 3));
  be_.residual_forward(a.res3, a.res2, proj, NC);
}

void GptBlock::recompute_attention(const BlockActs& a, TypedPtr scratch) const {
  be_.attention_forward(scratch, a.att, a.qkv, B_, T_, Ct_, NHt_);
}

void GptBlock::backward(TypedPtr dresidual, const BlockWeights& w, const BlockGrads& dw, ConstTypedPtr x,
                        const BlockActs& a, const BlockGradScratch& s, uint64_t seed) const {
  const int N = B_ * T_;
  // MLP branch.
  if (w.mlp_proj_la) {  // the adapter's dinp joins the layer's before the GELU's backward
    mlp_proj_.backward(s.dfch, dw.mlp_proj_w, dw.mlp_proj_b, dresidual, a.fch_gelu, w.mlp_proj_w, N);
    mlp_proj_lora_.backward(s.dfch, dw.mlp_proj_la, dw.mlp_proj_lb, dresidual, a.fch_gelu, a.mlp_proj_us,
                            w.mlp_proj_la, w.mlp_proj_lb, s.lora_du, s.lora_wide, N, target_seed(seed, 3));
    be_.gelu_backward(s.dfch, a.fch, s.dfch, size_t(N) * 4 * Ct_);
  } else {
    mlp_proj_.backward_gelu(s.dfch, dw.mlp_proj_w, dw.mlp_proj_b, dresidual, a.fch_gelu, w.mlp_proj_w, a.fch, N);
  }
  fc_.backward(s.dln, dw.fc_w, dw.fc_b, s.dfch, a.ln2, w.fc_w, N);
  if (w.fc_la)
    fc_lora_.backward(s.dln, dw.fc_la, dw.fc_lb, s.dfch, a.ln2, a.fc_us, w.fc_la, w.fc_lb, s.lora_du, s.lora_wide, N,
                      target_seed(seed, 2));
  be_.layernorm_backward(dresidual, dw.ln2_w, dw.ln2_b, s.dln, a.res2, w.ln2_w, a.ln2_mean, a.ln2_rstd, N, C_);
  // Attention branch.
  attn_proj_.backward(s.datty, dw.attn_proj_w, dw.attn_proj_b, dresidual, a.atty, w.attn_proj_w, N);
  if (w.attn_proj_la)
    attn_proj_lora_.backward(s.datty, dw.attn_proj_la, dw.attn_proj_lb, dresidual, a.atty, a.attn_proj_us,
                             w.attn_proj_la, w.attn_proj_lb, s.lora_du, s.lora_wide, N, target_seed(seed, 1));
  be_.attention_backward(s.dqkv, s.datty, a.qkv, a.atty, a.att, B_, T_, Ct_, NHt_);
  qkv_.backward(s.dln, dw.qkv_w, dw.qkv_b, s.dqkv, a.ln1, w.qkv_w, N);
  if (w.qkv_la)
    qkv_lora_.backward(s.dln, dw.qkv_la, dw.qkv_lb, s.dqkv, a.ln1, a.qkv_us, w.qkv_la, w.qkv_lb, s.lora_du,
                       s.lora_wide, N, target_seed(seed, 0));
  be_.layernorm_backward(dresidual, dw.ln1_w, dw.ln1_b, s.dln, x, w.ln1_w, a.ln1_mean, a.ln1_rstd, N, C_);
}

}  // namespace loom
