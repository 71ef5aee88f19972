#include "engine/model/gpt.hpp"

#include "engine/model/gpt_memory.hpp"

#include <stdexcept>
#include <string>

namespace loom {

void* Gpt::alloc_bytes(size_t bytes, bool activation) {
  void* ptr = be_.alloc_bytes(bytes);
  owned_.push_back(ptr);
  if (activation) act_bytes_ += bytes;
  return ptr;
}

namespace {
StageSpec whole_if_default(StageSpec s, int n_layer) {
  if (s.n_layers < 0) s.n_layers = n_layer;
  return s;
}
}  // namespace

Gpt::Gpt(Backend& backend, const GptShape& shape, int micro_batch, TensorParallel tp, StageSpec stage, int slots,
         Recompute recompute, DType compute)
    : be_(backend),
      shape_(shape),
      tp_(tp),
      stage_(whole_if_default(stage, shape.n_layer)),
      table_(gpt_param_table(shape, tp.rank, tp.size, stage_)),
      B_(micro_batch),
      embed_(backend, tp, shape.vocab_pad, shape.d_model),
      block_(backend, tp, shape, micro_batch),
      head_(backend, tp, shape.d_model, shape.vocab_pad / tp.size),
      loss_(backend, tp, shape.vocab, shape.vocab_pad),
      compute_(compute),
      recompute_(recompute) {
  if (shape.d_model % shape.n_head != 0) throw std::invalid_argument("d_model must be divisible by n_head");
  if (shape.n_head % tp.size != 0 || shape.vocab_pad % tp.size != 0)
    throw std::invalid_argument("n_head and the padded vocabulary must be divisible by tp");
  if (tp.size > 1 && !tp.comm) throw std::invalid_argument("tensor parallelism needs a tp communicator");
  if (slots < 1) throw std::invalid_argument("a stage needs at least one activation slot");
  if (compute != DType::f32 && compute != DType::bf16 && compute != DType::f16)
    throw std::invalid_argument("the compute dtype must be fp32, bf16 or fp16");
  const size_t N = size_t(B_) * shape.seq_len, C = shape.d_model, Ct = C / size_t(tp.size);
  const size_t Vt = size_t(embed_.rows());
  params_ = alloc_f32(table_.total(), false);
  grads_ = alloc_f32(table_.total(), false);
  wparams_ = compute_ == DType::f32 ? TypedPtr(params_)
                                    : TypedPtr(alloc_bytes(table_.total() * dtype_size(compute_), false), compute_);
  slots_.resize(size_t(slots));
  for (Slot& s : slots_) {
    s.tokens = static_cast<int32_t*>(alloc_bytes(N * sizeof(int32_t), false));
    s.targets = static_cast<int32_t*>(alloc_bytes(N * sizeof(int32_t), false));
    s.input = alloc_act(N * C);
    s.layers.resize(size_t(stage_.n_layers));
    for (auto& a : s.layers) {
      a = BlockActs{};
      a.res3 = alloc_act(N * C);
      // Full: the rest comes from shared_, refilled in backward; selective: so does att.
      if (recompute_ != Recompute::Full) alloc_block_buffers(a, recompute_ == Recompute::None);
    }
    if (stage_.last) {
      s.lnf = alloc_act(N * C);
      s.lnf_mean = alloc_f32(N);
      s.lnf_rstd = alloc_f32(N);
      s.logits = alloc_act(N * Vt);
    }
  }
  losses_ = alloc_f32(N);
  ce_max_ = alloc_f32(N);
  ce_partials_ = alloc_f32(2 * N);
  proj_scratch_ = alloc_act(N * C);
  dresidual_ = alloc_act(N * C);
  dblock_.dln = alloc_act(N * C);
  dout_ = alloc_act(N * C);
  dblock_.datty = alloc_act(N * Ct);
  dblock_.dqkv = alloc_act(N * 3 * Ct);
  dblock_.dfch = alloc_act(N * 4 * Ct);
  if (stage_.n_layers > 0 && recompute_ == Recompute::Selective) shared_.att = alloc_bytes(attention_saved_bytes(), true);
  if (stage_.n_layers > 0 && recompute_ == Recompute::Full) alloc_block_buffers(shared_, true);
  // `loom plan` predicts memory from gpt_activation_bytes: it must describe exactly this.
  const GptActivationBytes expect = gpt_activation_bytes(shape, B_, tp.size, stage_.n_layers, stage_.last, slots,
                                                         attention_saved_bytes(), dtype_size(compute_), recompute_);
  if (expect.total(slots) != act_bytes_)
    throw std::logic_error("gpt_activation_bytes (" + std::to_string(expect.total(slots)) +
                           ") disagrees with the model's allocations (" + std::to_string(act_bytes_) + ")");
}

Gpt::~Gpt() {
  for (void* ptr : owned_) be_.release(ptr);
}

void Gpt::sync_compute_weights() {
  if (compute_ != DType::f32) be_.convert(wparams_, params_, table_.total());
}

void Gpt::set_params(const float* host) {
  be_.upload(params_, host, table_.total());
  sync_compute_weights();
}
void Gpt::set_params(size_t offset, size_t n, const float* host) {
  if (offset + n > table_.total()) throw std::out_of_range("Gpt::set_params: range past the parameters");
  be_.upload(params_ + offset, host, n);
  if (compute_ != DType::f32) be_.convert(wparams_ + offset, params_ + offset, n);
}
void Gpt::get_params(float* host) const { be_.download(host, params_, table_.total()); }
void Gpt::get_grads(float* host) const { be_.download(host, grads_, table_.total()); }
void Gpt::zero_grads() { be_.zero(grads_, table_.total()); }

TypedPtr Gpt::input(int slot) { return slots_.at(size_t(slot)).input; }
ConstTypedPtr Gpt::output(int slot) { return slots_.at(size_t(slot)).layers.back().res3; }
TypedPtr Gpt::output_grad() { return dout_; }
ConstTypedPtr Gpt::input_grad() { return dresidual_; }

size_t Gpt::attention_saved_bytes() const {
  return be_.attention_saved_bytes(B_, shape_.seq_len, shape_.n_head / tp_.size, compute_);
}

// Every buffer of one block but its output res3 (att only if `with_att`).
void Gpt::alloc_block_buffers(BlockActs& a, bool with_att) {
  const size_t N = size_t(B_) * shape_.seq_len, C = shape_.d_model, Ct = C / size_t(tp_.size);
  a.ln1 = alloc_act(N * C);
  a.ln1_mean = alloc_f32(N);
  a.ln1_rstd = alloc_f32(N);
  a.qkv = alloc_act(N * 3 * Ct);
  a.atty = alloc_act(N * Ct);
  if (with_att) a.att = alloc_bytes(attention_saved_bytes(), true);
  a.res2 = alloc_act(N * C);
  a.ln2 = alloc_act(N * C);
  a.ln2_mean = alloc_f32(N);
  a.ln2_rstd = alloc_f32(N);
  a.fch = alloc_act(N * 4 * Ct);
  a.fch_gelu = alloc_act(N * 4 * Ct);
}

// The buffers block i of slot s writes in the forward pass: its own, or (recompute) partly or
// wholly the shared ones.
BlockActs Gpt::acts(const Slot& s, int i) const {
  BlockActs a = s.layers[size_t(i)];
  if (recompute_ == Recompute::Full) {
    const TypedPtr res3 = a.res3;
    a = shared_;
    a.res3 = res3;
  } else if (recompute_ == Recompute::Selective) {
    a.att = shared_.att;
  }
  return a;
}

namespace {
template <typename F, typename... A>
void call(const F& hook, A... args) {
  if (hook) hook(args...);
}
}  // namespace

double Gpt::forward(int slot, const int32_t* tokens, const int32_t* targets, float dloss) {
  const int T = shape_.seq_len, C = shape_.d_model, N = B_ * T;
  Slot& s = slots_.at(size_t(slot));
  if (stage_.first) {
    be_.upload_i32(s.tokens, tokens, N);
    embed_.forward(s.input, s.tokens, p("wte"), p("wpe"), B_, T);
  }
  ConstTypedPtr x = s.input;  // the residual stream entering each block
  for (int i = 0; i < stage_.n_layers; ++i) {
    const int l = stage_.first_layer + i;
    call(hooks_.before_forward, l);
    block_.forward(BlockWeights::at(table_, wparams_, l), x, acts(s, i), proj_scratch_);
    x = s.layers[size_t(i)].res3;
  }
  if (!stage_.last) return 0.0;
  be_.upload_i32(s.targets, targets, N);
  be_.layernorm_forward(s.lnf, s.lnf_mean, s.lnf_rstd, x, p("ln_f.weight"), p("ln_f.bias"), N, C);
  head_.forward(s.logits, s.lnf, p("wte"), ConstTypedPtr(), N);  // tied: logits = lnf @ wte_slice^T
  s.grad_logits = dloss != 0.0f;
  loss_.forward(losses_, s.logits, s.targets, N, dloss, s.grad_logits, ce_max_, ce_partials_);
  return be_.sum(losses_, N) / N;
}

void Gpt::backward(int slot) {
  Slot& s = slots_.at(size_t(slot));
  const int T = shape_.seq_len, C = shape_.d_model, N = B_ * T;
  if (stage_.last && !s.grad_logits)
    throw std::logic_error("Gpt::backward needs a preceding forward with dloss != 0");
  be_.zero(dresidual_, size_t(N) * C);
  if (stage_.last) {
    // Head (column-parallel over the vocabulary, tied to wte): dlnf (N,C) = all-reduce of
    // dlogits @ wte_slice; dwte_slice += dlogits^T @ lnf.
    const TypedPtr dlnf = dblock_.dln;
    head_.backward(dlnf, g("wte"), nullptr, s.logits, s.lnf, p("wte"), N);
    const ConstTypedPtr x_last = stage_.n_layers > 0 ? s.layers.back().res3 : s.input;
    be_.layernorm_backward(dresidual_, g("ln_f.weight"), g("ln_f.bias"), dlnf, x_last, p("ln_f.weight"), s.lnf_mean,
                           s.lnf_rstd, N, C);
    s.grad_logits = false;
    // wte (offset 0) also gets the embedding's gradient at the very end (or, in a pipeline, the
    // embedding group's sum), so the head finishes only ln_f.
    call(hooks_.grads_ready_from, table_.find("ln_f.weight").offset);
  } else {
    // d(output) arrived from the next stage into dout_: it starts the residual-stream gradient.
    be_.residual_forward(dresidual_, dresidual_, dout_, size_t(N) * C);
  }
  // dresidual_ holds dL/d(residual stream) at the output of the current block (the same on every
  // tp rank).
  for (int i = stage_.n_layers - 1; i >= 0; --i) {
    const int l = stage_.first_layer + i;
    const BlockWeights w = BlockWeights::at(table_, wparams_, l);
    const BlockGrads dw = BlockGrads::at(table_, grads_, l);
    const ConstTypedPtr x = i == 0 ? s.input : s.layers[size_t(i) - 1].res3;
    const BlockActs a = acts(s, i);
    if (recompute_ == Recompute::Full) {
      // Re-run the block (deterministic: the same values as the forward pass) into the shared
      // buffers; res3 is rewritten with the same bits.
      call(hooks_.before_forward, l);
      block_.forward(w, x, a, proj_scratch_);
    }
    call(hooks_.before_backward, l);
    if (recompute_ == Recompute::Selective) block_.recompute_attention(a, proj_scratch_);
    block_.backward(dresidual_, w, dw, x, a, dblock_);
    call(hooks_.grads_ready_from, table_.layer_range(l).first);
  }
  if (stage_.first) embed_.backward(g("wte"), g("wpe"), dresidual_, s.tokens, B_, T);
  // Offset 0 is final now on the first stage; on a last stage it holds the tied wte.
  call(hooks_.grads_ready_from, size_t(0));
}

std::vector<size_t> Gpt::grad_ready_points() const {
  std::vector<size_t> pts;
  if (stage_.last) pts.push_back(table_.find("ln_f.weight").offset);
  for (int i = stage_.n_layers - 1; i >= 0; --i) pts.push_back(table_.layer_range(stage_.first_layer + i).first);
  pts.push_back(0);
  return pts;
}

std::vector<float> Gpt::logits() const {
  const Slot& s = slots_.at(0);
  if (!stage_.last || s.grad_logits)
    throw std::logic_error("Gpt::logits: only after a forward with dloss == 0, on the last stage");
  const size_t n = size_t(B_) * shape_.seq_len * size_t(embed_.rows());
  std::vector<float> out(n);
  if (compute_ == DType::f32) {
    be_.download(out.data(), s.logits.as<float>(), n);
    return out;
  }
  std::vector<uint16_t> raw(n);  // 16-bit storage, widened on the host
  be_.copy_to_host(raw.data(), s.logits.data, n * 2);
  for (size_t i = 0; i < n; ++i)
    out[i] = compute_ == DType::bf16 ? float(bf16::from_bits(raw[i])) : fp16::to_float(raw[i]);
  return out;
}

}  // namespace loom
