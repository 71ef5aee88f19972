#include "engine/model/gpt.hpp"

#include <stdexcept>

namespace loom {

struct Gpt::LayerParams {
  float *ln1w, *ln1b, *qkvw, *qkvb, *projw, *projb, *ln2w, *ln2b, *fcw, *fcb, *fcprojw, *fcprojb;
};

Gpt::LayerParams Gpt::layer(float* base, int l) {
  const std::string h = "h." + std::to_string(l) + ".";
  auto at = [&](const char* n) { return base + table_.find(h + n).offset; };
  return {at("ln1.weight"),   at("ln1.bias"),  at("attn.qkv.weight"), at("attn.qkv.bias"),
          at("attn.proj.weight"), at("attn.proj.bias"), at("ln2.weight"), at("ln2.bias"),
          at("mlp.fc.weight"), at("mlp.fc.bias"), at("mlp.proj.weight"), at("mlp.proj.bias")};
}

float* Gpt::alloc(size_t n, bool activation) {
  float* ptr = be_.alloc(n);
  owned_.push_back(ptr);
  if (activation) act_floats_ += n;
  return ptr;
}

Gpt::Gpt(Backend& backend, const GptShape& shape, int micro_batch)
    : be_(backend), shape_(shape), table_(gpt_param_table(shape)), B_(micro_batch) {
  if (shape.d_model % shape.n_head != 0) throw std::invalid_argument("d_model must be divisible by n_head");
  const size_t N = size_t(B_) * shape.seq_len, C = shape.d_model;
  params_ = alloc(table_.total(), false);
  grads_ = alloc(table_.total(), false);
  tokens_ = be_.alloc_i32(N);
  targets_ = be_.alloc_i32(N);
  encoded_ = alloc(N * C);
  acts_.resize(shape.n_layer);
  for (auto& a : acts_) {
    a.ln1 = alloc(N * C);
    a.ln1_mean = alloc(N);
    a.ln1_rstd = alloc(N);
    a.qkv = alloc(N * 3 * C);
    a.atty = alloc(N * C);
    a.att = alloc(be_.attention_saved_floats(B_, shape.seq_len, shape.n_head));
    a.res2 = alloc(N * C);
    a.ln2 = alloc(N * C);
    a.ln2_mean = alloc(N);
    a.ln2_rstd = alloc(N);
    a.fch = alloc(N * 4 * C);
    a.fch_gelu = alloc(N * 4 * C);
    a.res3 = alloc(N * C);
  }
  lnf_ = alloc(N * C);
  lnf_mean_ = alloc(N);
  lnf_rstd_ = alloc(N);
  logits_ = alloc(N * shape.vocab_pad);
  losses_ = alloc(N);
  proj_scratch_ = alloc(N * C);
  dresidual_ = alloc(N * C);
  dln_ = alloc(N * C);
  datty_ = alloc(N * C);
  dqkv_ = alloc(N * 3 * C);
  dfch_ = alloc(N * 4 * C);
}

Gpt::~Gpt() {
  for (float* ptr : owned_) be_.release(ptr);
  be_.release(tokens_);
  be_.release(targets_);
}

void Gpt::set_params(const float* host) { be_.upload(params_, host, table_.total()); }
void Gpt::get_params(float* host) const { be_.download(host, params_, table_.total()); }
void Gpt::get_grads(float* host) const { be_.download(host, grads_, table_.total()); }
void Gpt::zero_grads() { be_.zero(grads_, table_.total()); }

double Gpt::forward(const int32_t* tokens, const int32_t* targets, float dloss) {
  const int T = shape_.seq_len, C = shape_.d_model, NH = shape_.n_head, N = B_ * T;
  be_.upload_i32(tokens_, tokens, N);
  be_.upload_i32(targets_, targets, N);

  be_.encoder_forward(encoded_, tokens_, p("wte"), p("wpe"), B_, T, C);
  const float* x = encoded_;  // the residual stream entering block l
  for (int l = 0; l < shape_.n_layer; ++l) {
    LayerParams w = layer(params_, l);
    LayerActs& a = acts_[l];
    be_.layernorm_forward(a.ln1, a.ln1_mean, a.ln1_rstd, x, w.ln1w, w.ln1b, N, C);
    be_.matmul_forward(a.qkv, a.ln1, w.qkvw, w.qkvb, N, C, 3 * C);
    be_.attention_forward(a.atty, a.att, a.qkv, B_, T, C, NH);
    be_.matmul_forward(proj_scratch_, a.atty, w.projw, w.projb, N, C, C);
    be_.residual_forward(a.res2, x, proj_scratch_, size_t(N) * C);
    be_.layernorm_forward(a.ln2, a.ln2_mean, a.ln2_rstd, a.res2, w.ln2w, w.ln2b, N, C);
    be_.matmul_forward(a.fch, a.ln2, w.fcw, w.fcb, N, C, 4 * C);
    be_.gelu_forward(a.fch_gelu, a.fch, size_t(N) * 4 * C);
    be_.matmul_forward(proj_scratch_, a.fch_gelu, w.fcprojw, w.fcprojb, N, 4 * C, C);
    be_.residual_forward(a.res3, a.res2, proj_scratch_, size_t(N) * C);
    x = a.res3;
  }
  be_.layernorm_forward(lnf_, lnf_mean_, lnf_rstd_, x, p("ln_f.weight"), p("ln_f.bias"), N, C);
  // LM head tied to wte: logits (N,Vp) = lnf @ wte^T.
  be_.matmul_forward(logits_, lnf_, p("wte"), nullptr, N, C, shape_.vocab_pad);
  have_grad_logits_ = dloss != 0.0f;
  be_.softmax_crossentropy(losses_, logits_, targets_, N, shape_.vocab, shape_.vocab_pad, dloss, have_grad_logits_);
  return be_.sum(losses_, N) / N;
}

void Gpt::backward() {
  if (!have_grad_logits_) throw std::logic_error("Gpt::backward needs a preceding forward with dloss != 0");
  const int T = shape_.seq_len, C = shape_.d_model, NH = shape_.n_head, N = B_ * T;
  const int L = shape_.n_layer;
  be_.zero(dresidual_, size_t(N) * C);
  // Head: dlnf = dlogits @ wte; dwte += dlogits^T @ lnf.
  be_.matmul_backward(dln_, g("wte"), nullptr, logits_, lnf_, p("wte"), N, C, shape_.vocab_pad);
  be_.layernorm_backward(dresidual_, g("ln_f.weight"), g("ln_f.bias"), dln_, acts_[L - 1].res3, p("ln_f.weight"),
                         lnf_mean_, lnf_rstd_, N, C);
  // wte (offset 0) also gets the embedding's gradient at the very end, so the head finishes
  // only ln_f; each block then finishes its own contiguous range.
  if (grad_ready_) grad_ready_(table_.find("ln_f.weight").offset);
  // dresidual_ now holds dL/d(residual stream) at the output of the current block; each
  // LayerNorm backward adds its branch's contribution as the stream passes its fork.
  for (int l = L - 1; l >= 0; --l) {
    LayerParams w = layer(params_, l), dw = layer(grads_, l);
    LayerActs& a = acts_[l];
    const float* x = l == 0 ? encoded_ : acts_[l - 1].res3;
    // MLP branch: res3 = res2 + proj(gelu(fc(ln2(res2)))).
    be_.matmul_backward(dfch_, dw.fcprojw, dw.fcprojb, dresidual_, a.fch_gelu, w.fcprojw, N, 4 * C, C);
    be_.gelu_backward(dfch_, a.fch, dfch_, size_t(N) * 4 * C);
    be_.matmul_backward(dln_, dw.fcw, dw.fcb, dfch_, a.ln2, w.fcw, N, C, 4 * C);
    be_.layernorm_backward(dresidual_, dw.ln2w, dw.ln2b, dln_, a.res2, w.ln2w, a.ln2_mean, a.ln2_rstd, N, C);
    // Attention branch: res2 = x + proj(attn(qkv(ln1(x)))).
    be_.matmul_backward(datty_, dw.projw, dw.projb, dresidual_, a.atty, w.projw, N, C, C);
    be_.attention_backward(dqkv_, datty_, a.qkv, a.atty, a.att, B_, T, C, NH);
    be_.matmul_backward(dln_, dw.qkvw, dw.qkvb, dqkv_, a.ln1, w.qkvw, N, C, 3 * C);
    be_.layernorm_backward(dresidual_, dw.ln1w, dw.ln1b, dln_, x, w.ln1w, a.ln1_mean, a.ln1_rstd, N, C);
    if (grad_ready_) grad_ready_(size_t(dw.ln1w - grads_));
  }
  be_.encoder_backward(g("wte"), g("wpe"), dresidual_, tokens_, B_, T, C);
  if (grad_ready_) grad_ready_(0);
  have_grad_logits_ = false;
}

std::vector<size_t> Gpt::grad_ready_points() const {
  std::vector<size_t> pts = {table_.find("ln_f.weight").offset};
  for (int l = shape_.n_layer - 1; l >= 0; --l) pts.push_back(table_.find("h." + std::to_string(l) + ".ln1.weight").offset);
  pts.push_back(0);
  return pts;
}

std::vector<float> Gpt::logits() const {
  if (have_grad_logits_) throw std::logic_error("Gpt::logits: the last forward turned them into gradients");
  std::vector<float> out(size_t(B_) * shape_.seq_len * shape_.vocab_pad);
  be_.download(out.data(), logits_, out.size());
  return out;
}

}  // namespace loom
