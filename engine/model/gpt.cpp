#include "engine/model/gpt.hpp"

#include "engine/model/gpt_memory.hpp"
#include "parallel/grad_buckets.hpp"

#include <algorithm>
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
         Recompute recompute, DType compute, ModelHolds holds)
    : be_(backend),
      shape_(shape),
      tp_(tp),
      stage_(whole_if_default(stage, shape.n_layer)),
      table_(gpt_param_table(shape, tp.rank, tp.size, stage_)),
      frozen_table_(gpt_param_table(shape, tp.rank, tp.size, stage_, ParamSet::Frozen)),
      B_(micro_batch),
      embed_(backend, tp, shape.vocab_pad, shape.d_model),
      block_(backend, tp, shape, micro_batch),
      head_(backend, tp, shape.d_model, shape.vocab_pad / tp.size),
      loss_(backend, tp, shape.vocab, shape.vocab_pad),
      compute_(compute),
      holds_(holds),
      units_(param_units(table_)),
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
  if (holds_ != ModelHolds::Nothing) {
    params_ = alloc_f32(table_.total(), false);
    wparams_ = compute_ == DType::f32 ? TypedPtr(params_)
                                      : TypedPtr(alloc_bytes(table_.total() * dtype_size(compute_), false), compute_);
  }
  if (holds_ == ModelHolds::All) grads_ = alloc_f32(table_.total(), false);
  alloc_frozen();
  if (shape.lora.on()) {
    // LoRA needs every block of the stage to hold adapters (a unit each).
    const LoraSpec& l = shape.lora;
    if (!(l.qkv || l.attn_proj || l.fc || l.mlp_proj))
      throw std::invalid_argument("LoRA needs at least one target (qkv, attn_proj, fc, mlp_proj)");
  }
  wbase_.resize(units_.size());
  gbase_.resize(units_.size());
  for (size_t u = 0; u < units_.size(); ++u) {
    const ParamUnit& unit = units_[u];
    if (wparams_) wbase_[u] = wparams_ + unit.begin;
    if (grads_) gbase_[u] = grads_ + unit.begin;
    if (unit.kind == ParamUnit::Embedding) unit_embed_ = int(u);
    if (unit.kind == ParamUnit::Final) unit_final_ = int(u);
    if (unit.kind == ParamUnit::Block) unit_of_block_.push_back(int(u));
  }
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
  if (shape.lora.on() && stage_.n_layers > 0) {
    dblock_.lora_du = alloc_act(N * size_t(shape.lora.rank));
    dblock_.lora_wide = alloc_act(N * std::max(C, 4 * Ct));
    block_.set_lora_scratch(dblock_.lora_wide);
  }
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
  if (compute_ != DType::f32 && params_) be_.convert(wparams_, params_, table_.total());
}

void Gpt::set_storage(UnitStorage* storage) {
  if (holds_ != ModelHolds::All && !storage) throw std::logic_error("Gpt::set_storage: this model needs a storage");
  if (storage && storage->holds_weights() != (holds_ == ModelHolds::Nothing))
    throw std::logic_error("Gpt::set_storage: the storage's weights and the model's disagree");
  storage_ = storage;
}

namespace {
[[noreturn]] void no_storage(const char* what) {
  throw std::logic_error(std::string("Gpt::") + what + ": the model does not hold its weights and has no storage");
}
}  // namespace

void Gpt::set_params(const float* host) { set_params(0, table_.total(), host); }
void Gpt::set_params(size_t offset, size_t n, const float* host) {
  if (offset + n > table_.total()) throw std::out_of_range("Gpt::set_params: range past the parameters");
  if (!params_) {
    if (!storage_) no_storage("set_params");
    storage_->set_master(offset, n, host);
    return;
  }
  be_.upload(params_ + offset, host, n);
  if (compute_ != DType::f32) be_.convert(wparams_ + offset, params_ + offset, n);
}
void Gpt::get_params(float* host) const {
  if (params_) {
    be_.download(host, params_, table_.total());
    return;
  }
  visit_params([&](size_t begin, size_t n, const float* data) { std::copy(data, data + n, host + begin); });
}
void Gpt::visit_params(const std::function<void(size_t begin, size_t n, const float* data)>& use) const {
  if (!params_) {
    if (!storage_) no_storage("visit_params");
    storage_->visit_master(use);
    return;
  }
  parallel::visit_pieces(
      table_.total(), [&](parallel::Range part, size_t, float* dst) { be_.download(dst, params_ + part.begin, part.size()); },
      use);
}
void Gpt::get_grads(float* host) const {
  if (!grads_) throw std::logic_error("Gpt::get_grads: the gradients are sharded (ZeRO-2/3)");
  be_.download(host, grads_, table_.total());
}
void Gpt::zero_grads() {
  if (grads_) be_.zero(grads_, table_.total());
}

// Unit -1 (a part of the model with nothing trainable: LoRA's frozen embedding or final
// LayerNorm) has no weights to acquire and no gradients.
TypedPtr Gpt::weights(int u, int next) {
  if (u < 0) return TypedPtr();
  if (storage_ && holds_ == ModelHolds::Nothing) wbase_[size_t(u)] = storage_->acquire_weights(u, next);
  return wbase_[size_t(u)];
}
void Gpt::release(int u) {
  if (u < 0) return;
  if (storage_ && holds_ == ModelHolds::Nothing) {
    storage_->release_weights(u);
    wbase_[size_t(u)] = TypedPtr();
  }
}
float* Gpt::grads_of(int u) {
  if (u < 0) return nullptr;
  if (storage_ && holds_ != ModelHolds::All) gbase_[size_t(u)] = storage_->acquire_grads(u);
  return gbase_[size_t(u)];
}
void Gpt::grads_done(int u) {
  if (u < 0) return;
  if (storage_ && holds_ != ModelHolds::All) {
    storage_->grads_done(u);
    gbase_[size_t(u)] = nullptr;
  } else if (hooks_.grads_ready_from) {
    hooks_.grads_ready_from(units_[size_t(u)].begin);
  }
}

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
  const LoraSpec& l = shape_.lora;
  if (l.on()) {
    const size_t nr = N * size_t(l.rank);
    if (l.qkv) a.qkv_us = alloc_act(nr);
    if (l.attn_proj) a.attn_proj_us = alloc_act(nr);
    if (l.fc) a.fc_us = alloc_act(nr);
    if (l.mlp_proj) a.mlp_proj_us = alloc_act(nr);
  }
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


// Weights are asked for unit by unit just before use and given back right after (ZeRO-3 gathers
// and frees them; flat models get their own views back), each time naming the unit that comes
// next so that its gather can overlap this unit's compute. The tied wte (in the embedding unit) is
// used twice per forward on a stage that is first and last: it is given back after the lookup and
// asked for again for the head (one more gather instead of holding the largest unit through the
// whole pass); the head's weights stay from its forward to its backward, which follows at once
// on a last stage (1F1B), unless the forward computes no gradient (evaluation).
double Gpt::forward(int slot, const int32_t* tokens, const int32_t* targets, float dloss) {
  const int T = shape_.seq_len, C = shape_.d_model, N = B_ * T, L = stage_.n_layers;
  Slot& s = slots_.at(size_t(slot));
  s.dropping = dloss != 0.0f && shape_.lora.on() && shape_.lora.dropout > 0;
  const int after_blocks = stage_.last ? unit_final_ : -1;
  if (stage_.first) {
    be_.upload_i32(s.tokens, tokens, N);
    weights(unit_embed_, L > 0 ? unit_of_block_[0] : after_blocks);
    embed_.forward(s.input, s.tokens, p(unit_embed_, "wte"), p(unit_embed_, "wpe"), B_, T);
    release(unit_embed_);
  }
  ConstTypedPtr x = s.input;  // the residual stream entering each block
  for (int i = 0; i < L; ++i) {
    const int u = unit_of_block_[size_t(i)];
    const TypedPtr w = weights(u, i + 1 < L ? unit_of_block_[size_t(i) + 1] : after_blocks);
    dequantize_block(stage_.first_layer + i);
    block_.forward(block_weights(u, w, stage_.first_layer + i), x, acts(s, i), proj_scratch_,
                   block_dropout_seed(s, stage_.first_layer + i));
    release(u);
    x = s.layers[size_t(i)].res3;
  }
  if (!stage_.last) return 0.0;
  be_.upload_i32(s.targets, targets, N);
  weights(unit_final_, unit_embed_);
  weights(unit_embed_, -1);
  be_.layernorm_forward(s.lnf, s.lnf_mean, s.lnf_rstd, x, p(unit_final_, "ln_f.weight"), p(unit_final_, "ln_f.bias"),
                        N, C);
  // Tied: logits = lnf @ wte_slice^T.
  head_.forward(s.logits, s.lnf, p(unit_embed_, "wte"), ConstTypedPtr(), N);
  s.grad_logits = dloss != 0.0f;
  loss_.forward(losses_, s.logits, s.targets, N, dloss, s.grad_logits, ce_max_, ce_partials_);
  if (!s.grad_logits) {
    release(unit_embed_);
    release(unit_final_);
  }
  return be_.sum(losses_, N) / N;
}

void Gpt::backward(int slot) {
  Slot& s = slots_.at(size_t(slot));
  const int T = shape_.seq_len, C = shape_.d_model, N = B_ * T, L = stage_.n_layers;
  if (stage_.last && !s.grad_logits)
    throw std::logic_error("Gpt::backward needs a preceding forward with dloss != 0");
  be_.zero(dresidual_, size_t(N) * C);
  if (stage_.last) {
    // Head (column-parallel over the vocabulary, tied to wte): dlnf (N,C) = all-reduce of
    // dlogits @ wte_slice; dwte_slice += dlogits^T @ lnf. Its weights are still held from the
    // forward (weights() returns them).
    weights(unit_final_, unit_embed_);
    weights(unit_embed_, L > 0 ? unit_of_block_[size_t(L) - 1] : -1);
    const TypedPtr dlnf = dblock_.dln;
    grads_of(unit_embed_);
    grads_of(unit_final_);
    head_.backward(dlnf, g(unit_embed_, "wte"), nullptr, s.logits, s.lnf, p(unit_embed_, "wte"), N);
    const ConstTypedPtr x_last = L > 0 ? s.layers.back().res3 : s.input;
    be_.layernorm_backward(dresidual_, g(unit_final_, "ln_f.weight"), g(unit_final_, "ln_f.bias"), dlnf, x_last,
                           p(unit_final_, "ln_f.weight"), s.lnf_mean, s.lnf_rstd, N, C);
    s.grad_logits = false;
    release(unit_embed_);
    release(unit_final_);
    // wte (in the embedding unit) also gets the embedding's gradient at the very end (or, in a
    // pipeline, the embedding group's sum), so the head finishes only ln_f.
    grads_done(unit_final_);
  } else {
    // d(output) arrived from the next stage into dout_: it starts the residual-stream gradient.
    be_.residual_forward(dresidual_, dresidual_, dout_, size_t(N) * C);
  }
  // dresidual_ holds dL/d(residual stream) at the output of the current block (the same on every
  // tp rank).
  for (int i = L - 1; i >= 0; --i) {
    const int l = stage_.first_layer + i, u = unit_of_block_[size_t(i)];
    dequantize_block(l);
    const BlockWeights w = block_weights(u, weights(u, i > 0 ? unit_of_block_[size_t(i) - 1] : -1), l);
    const BlockGrads dw = block_grads(u, grads_of(u), l);
    const ConstTypedPtr x = i == 0 ? s.input : s.layers[size_t(i) - 1].res3;
    const BlockActs a = acts(s, i);
    if (recompute_ == Recompute::Full) {
      // Re-run the block (deterministic: the same values as the forward pass) into the shared
      // buffers; res3 is rewritten with the same bits.
      block_.forward(w, x, a, proj_scratch_, block_dropout_seed(s, l));
    }
    if (recompute_ == Recompute::Selective) block_.recompute_attention(a, proj_scratch_);
    block_.backward(dresidual_, w, dw, x, a, dblock_, block_dropout_seed(s, l));
    release(u);
    grads_done(u);
  }
  if (stage_.first && unit_embed_ >= 0) {  // (a frozen embedding: nothing to compute)
    grads_of(unit_embed_);
    embed_.backward(g(unit_embed_, "wte"), g(unit_embed_, "wpe"), dresidual_, s.tokens, B_, T);
  }
  // The embedding unit is final now on the first stage; on a last stage it holds the tied wte.
  // (Flat gradients: offset 0, whatever unit starts there.)
  if (unit_embed_ >= 0) {
    grads_done(unit_embed_);
  } else if (!storage_ || holds_ == ModelHolds::All) {
    if (hooks_.grads_ready_from) hooks_.grads_ready_from(0);
  }
}

std::vector<size_t> Gpt::grad_ready_points() const {
  std::vector<size_t> pts;
  if (stage_.last && unit_final_ >= 0) pts.push_back(units_[size_t(unit_final_)].begin);
  for (int i = stage_.n_layers - 1; i >= 0; --i) pts.push_back(units_[size_t(unit_of_block_[size_t(i)])].begin);
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

std::vector<float> Gpt::position_losses() const {
  if (!stage_.last) throw std::logic_error("Gpt::position_losses: only on the last stage");
  std::vector<float> out(size_t(B_) * shape_.seq_len);  // losses stay fp32 in every precision
  be_.download(out.data(), losses_, out.size());
  return out;
}

}  // namespace loom
