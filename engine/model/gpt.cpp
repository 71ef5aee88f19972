#include "engine/model/gpt.hpp"

#include <algorithm>
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

void Gpt::tp_all_reduce(float* buf, size_t n, parallel::ReduceOp op) {
  if (tp_.size > 1) tp_.comm->all_reduce(buf, n, op);
}

Gpt::Gpt(Backend& backend, const GptShape& shape, int micro_batch, TensorParallel tp)
    : be_(backend), shape_(shape), tp_(tp), table_(gpt_param_table(shape, tp.rank, tp.size)), B_(micro_batch) {
  if (shape.d_model % shape.n_head != 0) throw std::invalid_argument("d_model must be divisible by n_head");
  if (shape.n_head % tp.size != 0 || shape.vocab_pad % tp.size != 0)
    throw std::invalid_argument("n_head and the padded vocabulary must be divisible by tp");
  if (tp.size > 1 && !tp.comm) throw std::invalid_argument("tensor parallelism needs a tp communicator");
  Ct_ = shape.d_model / tp.size;
  NHt_ = shape.n_head / tp.size;
  Vt_ = shape.vocab_pad / tp.size;
  vocab_start_ = tp.rank * Vt_;
  v_real_ = std::clamp(shape.vocab - vocab_start_, 0, Vt_);
  const size_t N = size_t(B_) * shape.seq_len, C = shape.d_model, Ct = size_t(Ct_);
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
    a.qkv = alloc(N * 3 * Ct);
    a.atty = alloc(N * Ct);
    a.att = alloc(be_.attention_saved_floats(B_, shape.seq_len, NHt_));
    a.res2 = alloc(N * C);
    a.ln2 = alloc(N * C);
    a.ln2_mean = alloc(N);
    a.ln2_rstd = alloc(N);
    a.fch = alloc(N * 4 * Ct);
    a.fch_gelu = alloc(N * 4 * Ct);
    a.res3 = alloc(N * C);
  }
  lnf_ = alloc(N * C);
  lnf_mean_ = alloc(N);
  lnf_rstd_ = alloc(N);
  logits_ = alloc(N * size_t(Vt_));
  losses_ = alloc(N);
  ce_max_ = alloc(N);
  ce_partials_ = alloc(2 * N);
  proj_scratch_ = alloc(N * C);
  dresidual_ = alloc(N * C);
  dln_ = alloc(N * C);
  datty_ = alloc(N * Ct);
  dqkv_ = alloc(N * 3 * Ct);
  dfch_ = alloc(N * 4 * Ct);
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
  const int T = shape_.seq_len, C = shape_.d_model, N = B_ * T;
  const int Ct = Ct_;
  const bool lead = tp_.rank == 0;  // adds the replicated terms that a tp all-reduce would sum tp times
  be_.upload_i32(tokens_, tokens, N);
  be_.upload_i32(targets_, targets, N);

  // Vocab-parallel embedding: each rank looks up the tokens in its slice, the sum over the group
  // is the full lookup (exact: the other ranks add zeros).
  be_.encoder_forward(encoded_, tokens_, p("wte"), lead ? p("wpe") : nullptr, B_, T, C, vocab_start_, Vt_);
  tp_all_reduce(encoded_, size_t(N) * C);
  const float* x = encoded_;  // the residual stream entering block l
  for (int l = 0; l < shape_.n_layer; ++l) {
    LayerParams w = layer(params_, l);
    LayerActs& a = acts_[l];
    be_.layernorm_forward(a.ln1, a.ln1_mean, a.ln1_rstd, x, w.ln1w, w.ln1b, N, C);
    be_.matmul_forward(a.qkv, a.ln1, w.qkvw, w.qkvb, N, C, 3 * Ct);  // column-parallel (f: identity)
    be_.attention_forward(a.atty, a.att, a.qkv, B_, T, Ct, NHt_);   // this rank's heads
    // Row-parallel: partial sums over this rank's input columns, then g: all-reduce. The
    // replicated bias is added once, by the lead rank.
    be_.matmul_forward(proj_scratch_, a.atty, w.projw, lead ? w.projb : nullptr, N, Ct, C);
    tp_all_reduce(proj_scratch_, size_t(N) * C);
    be_.residual_forward(a.res2, x, proj_scratch_, size_t(N) * C);
    be_.layernorm_forward(a.ln2, a.ln2_mean, a.ln2_rstd, a.res2, w.ln2w, w.ln2b, N, C);
    be_.matmul_forward(a.fch, a.ln2, w.fcw, w.fcb, N, C, 4 * Ct);
    be_.gelu_forward(a.fch_gelu, a.fch, size_t(N) * 4 * Ct);
    be_.matmul_forward(proj_scratch_, a.fch_gelu, w.fcprojw, lead ? w.fcprojb : nullptr, N, 4 * Ct, C);
    tp_all_reduce(proj_scratch_, size_t(N) * C);
    be_.residual_forward(a.res3, a.res2, proj_scratch_, size_t(N) * C);
    x = a.res3;
  }
  be_.layernorm_forward(lnf_, lnf_mean_, lnf_rstd_, x, p("ln_f.weight"), p("ln_f.bias"), N, C);
  // LM head tied to wte: logits (N, Vp/tp) = lnf @ wte_slice^T.
  be_.matmul_forward(logits_, lnf_, p("wte"), nullptr, N, C, Vt_);
  have_grad_logits_ = dloss != 0.0f;
  if (tp_.size == 1) {
    be_.softmax_crossentropy(losses_, logits_, targets_, N, shape_.vocab, shape_.vocab_pad, dloss, have_grad_logits_);
  } else {
    be_.crossentropy_max(ce_max_, logits_, N, Vt_, v_real_);
    tp_all_reduce(ce_max_, size_t(N), parallel::ReduceOp::Max);
    be_.crossentropy_partials(ce_partials_, logits_, ce_max_, targets_, N, Vt_, v_real_, vocab_start_);
    tp_all_reduce(ce_partials_, 2 * size_t(N));
    be_.crossentropy_finish(losses_, logits_, ce_max_, ce_partials_, targets_, N, Vt_, v_real_, vocab_start_, dloss,
                            have_grad_logits_);
  }
  return be_.sum(losses_, N) / N;
}

void Gpt::backward() {
  if (!have_grad_logits_) throw std::logic_error("Gpt::backward needs a preceding forward with dloss != 0");
  const int T = shape_.seq_len, C = shape_.d_model, N = B_ * T;
  const int L = shape_.n_layer, Ct = Ct_;
  be_.zero(dresidual_, size_t(N) * C);
  // Head: dlnf = dlogits @ wte_slice (partial over the vocabulary: all-reduce); dwte_slice +=
  // dlogits^T @ lnf.
  be_.matmul_backward(dln_, g("wte"), nullptr, logits_, lnf_, p("wte"), N, C, Vt_);
  tp_all_reduce(dln_, size_t(N) * C);
  be_.layernorm_backward(dresidual_, g("ln_f.weight"), g("ln_f.bias"), dln_, acts_[L - 1].res3, p("ln_f.weight"),
                         lnf_mean_, lnf_rstd_, N, C);
  // wte (offset 0) also gets the embedding's gradient at the very end, so the head finishes
  // only ln_f; each block then finishes its own contiguous range.
  if (grad_ready_) grad_ready_(table_.find("ln_f.weight").offset);
  // dresidual_ now holds dL/d(residual stream) at the output of the current block (the same on
  // every tp rank); each LayerNorm backward adds its branch's contribution as the stream passes
  // its fork.
  for (int l = L - 1; l >= 0; --l) {
    LayerParams w = layer(params_, l), dw = layer(grads_, l);
    LayerActs& a = acts_[l];
    const float* x = l == 0 ? encoded_ : acts_[l - 1].res3;
    // MLP branch: res3 = res2 + proj(gelu(fc(ln2(res2)))). Row-parallel backward (g: identity):
    // every rank computes the replicated bias gradient from the same dresidual.
    be_.matmul_backward(dfch_, dw.fcprojw, dw.fcprojb, dresidual_, a.fch_gelu, w.fcprojw, N, 4 * Ct, C);
    be_.gelu_backward(dfch_, a.fch, dfch_, size_t(N) * 4 * Ct);
    be_.matmul_backward(dln_, dw.fcw, dw.fcb, dfch_, a.ln2, w.fcw, N, C, 4 * Ct);
    tp_all_reduce(dln_, size_t(N) * C);  // f backward: the column-parallel input gradient
    be_.layernorm_backward(dresidual_, dw.ln2w, dw.ln2b, dln_, a.res2, w.ln2w, a.ln2_mean, a.ln2_rstd, N, C);
    // Attention branch: res2 = x + proj(attn(qkv(ln1(x)))).
    be_.matmul_backward(datty_, dw.projw, dw.projb, dresidual_, a.atty, w.projw, N, Ct, C);
    be_.attention_backward(dqkv_, datty_, a.qkv, a.atty, a.att, B_, T, Ct, NHt_);
    be_.matmul_backward(dln_, dw.qkvw, dw.qkvb, dqkv_, a.ln1, w.qkvw, N, C, 3 * Ct);
    tp_all_reduce(dln_, size_t(N) * C);
    be_.layernorm_backward(dresidual_, dw.ln1w, dw.ln1b, dln_, x, w.ln1w, a.ln1_mean, a.ln1_rstd, N, C);
    if (grad_ready_) grad_ready_(size_t(dw.ln1w - grads_));
  }
  // Every rank computes the (replicated) wpe gradient; wte only for its vocabulary slice.
  be_.encoder_backward(g("wte"), g("wpe"), dresidual_, tokens_, B_, T, C, vocab_start_, Vt_);
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
  std::vector<float> out(size_t(B_) * shape_.seq_len * Vt_);
  be_.download(out.data(), logits_, out.size());
  return out;
}

}  // namespace loom
