#include "engine/model/gpt.hpp"

#include "engine/model/gpt_memory.hpp"

#include <algorithm>
#include <stdexcept>
#include <string>

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

namespace {
StageSpec whole_if_default(StageSpec s, int n_layer) {
  if (s.n_layers < 0) s.n_layers = n_layer;
  return s;
}
}  // namespace

Gpt::Gpt(Backend& backend, const GptShape& shape, int micro_batch, TensorParallel tp, StageSpec stage, int slots,
         Recompute recompute)
    : be_(backend),
      shape_(shape),
      tp_(tp),
      stage_(whole_if_default(stage, shape.n_layer)),
      table_(gpt_param_table(shape, tp.rank, tp.size, stage_)),
      B_(micro_batch),
      recompute_(recompute) {
  if (shape.d_model % shape.n_head != 0) throw std::invalid_argument("d_model must be divisible by n_head");
  if (shape.n_head % tp.size != 0 || shape.vocab_pad % tp.size != 0)
    throw std::invalid_argument("n_head and the padded vocabulary must be divisible by tp");
  if (tp.size > 1 && !tp.comm) throw std::invalid_argument("tensor parallelism needs a tp communicator");
  if (slots < 1) throw std::invalid_argument("a stage needs at least one activation slot");
  Ct_ = shape.d_model / tp.size;
  NHt_ = shape.n_head / tp.size;
  Vt_ = shape.vocab_pad / tp.size;
  vocab_start_ = tp.rank * Vt_;
  v_real_ = std::clamp(shape.vocab - vocab_start_, 0, Vt_);
  const size_t N = size_t(B_) * shape.seq_len, C = shape.d_model, Ct = size_t(Ct_);
  params_ = alloc(table_.total(), false);
  grads_ = alloc(table_.total(), false);
  slots_.resize(size_t(slots));
  for (Slot& s : slots_) {
    s.tokens = be_.alloc_i32(N);
    s.targets = be_.alloc_i32(N);
    owned_i32_.push_back(s.tokens);
    owned_i32_.push_back(s.targets);
    s.input = alloc(N * C);
    s.layers.resize(size_t(stage_.n_layers));
    for (auto& a : s.layers) {
      a = LayerActs{};
      a.res3 = alloc(N * C);
      // Full: the rest comes from shared_, refilled in backward; selective: so does att.
      if (recompute_ != Recompute::Full) alloc_block_buffers(a, recompute_ == Recompute::None);
    }
    if (stage_.last) {
      s.lnf = alloc(N * C);
      s.lnf_mean = alloc(N);
      s.lnf_rstd = alloc(N);
      s.logits = alloc(N * size_t(Vt_));
    }
  }
  losses_ = alloc(N);
  ce_max_ = alloc(N);
  ce_partials_ = alloc(2 * N);
  proj_scratch_ = alloc(N * C);
  dresidual_ = alloc(N * C);
  dln_ = alloc(N * C);
  dout_ = alloc(N * C);
  datty_ = alloc(N * Ct);
  dqkv_ = alloc(N * 3 * Ct);
  dfch_ = alloc(N * 4 * Ct);
  if (stage_.n_layers > 0 && recompute_ == Recompute::Selective) shared_.att = alloc(attention_saved_floats());
  if (stage_.n_layers > 0 && recompute_ == Recompute::Full) alloc_block_buffers(shared_, true);
  // `loom plan` predicts memory from gpt_activation_floats: it must describe exactly this.
  const GptActivationFloats expect = gpt_activation_floats(
      shape, B_, tp.size, stage_.n_layers, stage_.last, slots, attention_saved_floats(), recompute_);
  if (expect.total(slots) != act_floats_)
    throw std::logic_error("gpt_activation_floats (" + std::to_string(expect.total(slots)) +
                           ") disagrees with the model's allocations (" + std::to_string(act_floats_) + ")");
}

Gpt::~Gpt() {
  for (float* ptr : owned_) be_.release(ptr);
  for (int32_t* ptr : owned_i32_) be_.release(ptr);
}

void Gpt::set_params(const float* host) { be_.upload(params_, host, table_.total()); }
void Gpt::set_params(size_t offset, size_t n, const float* host) {
  if (offset + n > table_.total()) throw std::out_of_range("Gpt::set_params: range past the parameters");
  be_.upload(params_ + offset, host, n);
}
void Gpt::get_params(float* host) const { be_.download(host, params_, table_.total()); }
void Gpt::get_grads(float* host) const { be_.download(host, grads_, table_.total()); }
void Gpt::zero_grads() { be_.zero(grads_, table_.total()); }

float* Gpt::input(int slot) { return slots_.at(size_t(slot)).input; }
const float* Gpt::output(int slot) { return slots_.at(size_t(slot)).layers.back().res3; }
float* Gpt::output_grad() { return dout_; }
const float* Gpt::input_grad() { return dresidual_; }

size_t Gpt::attention_saved_floats() const {
  return be_.attention_saved_floats(B_, shape_.seq_len, NHt_);
}

// Every buffer of one block but its output res3 (att only if `with_att`).
void Gpt::alloc_block_buffers(LayerActs& a, bool with_att) {
  const size_t N = size_t(B_) * shape_.seq_len, C = shape_.d_model, Ct = size_t(Ct_);
  a.ln1 = alloc(N * C);
  a.ln1_mean = alloc(N);
  a.ln1_rstd = alloc(N);
  a.qkv = alloc(N * 3 * Ct);
  a.atty = alloc(N * Ct);
  if (with_att) a.att = alloc(attention_saved_floats());
  a.res2 = alloc(N * C);
  a.ln2 = alloc(N * C);
  a.ln2_mean = alloc(N);
  a.ln2_rstd = alloc(N);
  a.fch = alloc(N * 4 * Ct);
  a.fch_gelu = alloc(N * 4 * Ct);
}

// The buffers block i of slot s writes in the forward pass: its own, or (recompute) partly or
// wholly the shared ones.
Gpt::LayerActs Gpt::acts(const Slot& s, int i) const {
  LayerActs a = s.layers[size_t(i)];
  if (recompute_ == Recompute::Full) {
    const float* res3 = a.res3;
    a = shared_;
    a.res3 = const_cast<float*>(res3);
  } else if (recompute_ == Recompute::Selective) {
    a.att = shared_.att;
  }
  return a;
}

// One transformer block: x (N,C) -> a.res3, filling a's buffers.
void Gpt::layer_forward(int l, const float* x, const LayerActs& a) {
  const int T = shape_.seq_len, C = shape_.d_model, N = B_ * T;
  const int Ct = Ct_;
  const bool lead = tp_.rank == 0;  // adds the replicated terms that a tp all-reduce would sum tp times
  LayerParams w = layer(params_, l);
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
}

double Gpt::forward(int slot, const int32_t* tokens, const int32_t* targets, float dloss) {
  const int T = shape_.seq_len, C = shape_.d_model, N = B_ * T;
  const bool lead = tp_.rank == 0;  // adds the replicated terms that a tp all-reduce would sum tp times
  Slot& s = slots_.at(size_t(slot));
  if (stage_.first) {
    be_.upload_i32(s.tokens, tokens, N);
    // Vocab-parallel embedding: each rank looks up the tokens in its slice, the sum over the
    // group is the full lookup (exact: the other ranks add zeros).
    be_.encoder_forward(s.input, s.tokens, p("wte"), lead ? p("wpe") : nullptr, B_, T, C, vocab_start_, Vt_);
    tp_all_reduce(s.input, size_t(N) * C);
  }
  const float* x = s.input;  // the residual stream entering each block
  for (int i = 0; i < stage_.n_layers; ++i) {
    layer_forward(stage_.first_layer + i, x, acts(s, i));
    x = s.layers[size_t(i)].res3;
  }
  if (!stage_.last) return 0.0;
  be_.upload_i32(s.targets, targets, N);
  be_.layernorm_forward(s.lnf, s.lnf_mean, s.lnf_rstd, x, p("ln_f.weight"), p("ln_f.bias"), N, C);
  // LM head tied to wte: logits (N, Vp/tp) = lnf @ wte_slice^T.
  be_.matmul_forward(s.logits, s.lnf, p("wte"), nullptr, N, C, Vt_);
  s.grad_logits = dloss != 0.0f;
  if (tp_.size == 1) {
    be_.softmax_crossentropy(losses_, s.logits, s.targets, N, shape_.vocab, shape_.vocab_pad, dloss, s.grad_logits);
  } else {
    be_.crossentropy_max(ce_max_, s.logits, N, Vt_, v_real_);
    tp_all_reduce(ce_max_, size_t(N), parallel::ReduceOp::Max);
    be_.crossentropy_partials(ce_partials_, s.logits, ce_max_, s.targets, N, Vt_, v_real_, vocab_start_);
    tp_all_reduce(ce_partials_, 2 * size_t(N));
    be_.crossentropy_finish(losses_, s.logits, ce_max_, ce_partials_, s.targets, N, Vt_, v_real_, vocab_start_, dloss,
                            s.grad_logits);
  }
  return be_.sum(losses_, N) / N;
}

void Gpt::backward(int slot) {
  Slot& s = slots_.at(size_t(slot));
  const int T = shape_.seq_len, C = shape_.d_model, N = B_ * T;
  const int Ct = Ct_;
  if (stage_.last) {
    if (!s.grad_logits) throw std::logic_error("Gpt::backward needs a preceding forward with dloss != 0");
    be_.zero(dresidual_, size_t(N) * C);
    // Head: dlnf = dlogits @ wte_slice (partial over the vocabulary: all-reduce); dwte_slice +=
    // dlogits^T @ lnf.
    be_.matmul_backward(dln_, g("wte"), nullptr, s.logits, s.lnf, p("wte"), N, C, Vt_);
    tp_all_reduce(dln_, size_t(N) * C);
    const float* x_last = stage_.n_layers > 0 ? s.layers.back().res3 : s.input;
    be_.layernorm_backward(dresidual_, g("ln_f.weight"), g("ln_f.bias"), dln_, x_last, p("ln_f.weight"), s.lnf_mean,
                           s.lnf_rstd, N, C);
    s.grad_logits = false;
    // wte (offset 0) also gets the embedding's gradient at the very end (or, in a pipeline, the
    // embedding group's sum), so the head finishes only ln_f.
    if (grad_ready_) grad_ready_(table_.find("ln_f.weight").offset);
  } else {
    // d(output) arrived from the next stage into dout_: it starts the residual-stream gradient.
    be_.zero(dresidual_, size_t(N) * C);
    be_.residual_forward(dresidual_, dresidual_, dout_, size_t(N) * C);
  }
  // dresidual_ holds dL/d(residual stream) at the output of the current block (the same on every
  // tp rank); each LayerNorm backward adds its branch's contribution as the stream passes its fork.
  for (int i = stage_.n_layers - 1; i >= 0; --i) {
    const int l = stage_.first_layer + i;
    LayerParams w = layer(params_, l), dw = layer(grads_, l);
    const float* x = i == 0 ? s.input : s.layers[size_t(i) - 1].res3;
    const LayerActs a = acts(s, i);
    if (recompute_ == Recompute::Full) {
      // Re-run the block (deterministic: the same values as the forward pass) into the shared
      // buffers; res3 is rewritten with the same bits.
      layer_forward(l, x, a);
    } else if (recompute_ == Recompute::Selective) {
      // Attention's saved state again, from the kept q|k|v (its output, identical, goes to scratch).
      be_.attention_forward(proj_scratch_, a.att, a.qkv, B_, T, Ct, NHt_);
    }
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
  if (stage_.first) {
    // Every rank computes the (replicated) wpe gradient; wte only for its vocabulary slice.
    be_.encoder_backward(g("wte"), g("wpe"), dresidual_, s.tokens, B_, T, C, vocab_start_, Vt_);
  }
  // Offset 0 is final now on the first stage; on a last stage it holds the tied wte.
  if (grad_ready_) grad_ready_(0);
}

std::vector<size_t> Gpt::grad_ready_points() const {
  std::vector<size_t> pts;
  if (stage_.last) pts.push_back(table_.find("ln_f.weight").offset);
  for (int i = stage_.n_layers - 1; i >= 0; --i)
    pts.push_back(table_.find("h." + std::to_string(stage_.first_layer + i) + ".ln1.weight").offset);
  pts.push_back(0);
  return pts;
}

std::vector<float> Gpt::logits() const {
  const Slot& s = slots_.at(0);
  if (!stage_.last || s.grad_logits)
    throw std::logic_error("Gpt::logits: only after a forward with dloss == 0, on the last stage");
  std::vector<float> out(size_t(B_) * shape_.seq_len * Vt_);
  be_.download(out.data(), s.logits, out.size());
  return out;
}

}  // namespace loom
