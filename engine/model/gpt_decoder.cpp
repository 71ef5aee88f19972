#include "engine/model/gpt_decoder.hpp"

#include <stdexcept>
#include <string>

#include "engine/model/gpt_block.hpp"

namespace loom {

TypedPtr GptDecoder::alloc_act(size_t n) {
  TypedPtr p = be_.alloc(compute_, n);
  owned_.push_back(p.data);
  return p;
}

GptDecoder::GptDecoder(Backend& be, const GptShape& shape, TensorParallel tp, int batch, DType compute)
    : be_(be),
      shape_(shape),
      tp_(tp),
      table_(gpt_param_table(shape, tp.rank, tp.size)),
      B_(batch),
      compute_(compute),
      Ct_(shape.d_model / tp.size),
      NHt_(shape.n_head / tp.size),
      Vt_(shape.vocab_pad / tp.size),
      embed_(be, tp, shape.vocab_pad, shape.d_model),
      qkv_(be, tp, shape.d_model, 3 * Ct_),
      fc_(be, tp, shape.d_model, 4 * Ct_),
      head_(be, tp, shape.d_model, Vt_),
      attn_proj_(be, tp, Ct_, shape.d_model),
      mlp_proj_(be, tp, 4 * Ct_, shape.d_model) {
  const size_t T = size_t(shape.seq_len), C = size_t(shape.d_model), N = size_t(batch) * T;
  w_ = alloc_act(table_.total());
  for (int l = 0; l < shape.n_layer; ++l) {
    kcache_.push_back(alloc_act(size_t(batch) * T * size_t(Ct_)));
    vcache_.push_back(alloc_act(size_t(batch) * T * size_t(Ct_)));
  }
  tokens_ = be_.alloc_i32(N);
  owned_.push_back(tokens_);
  x_ = alloc_act(N * C);
  ln_ = alloc_act(N * C);
  proj_ = alloc_act(N * C);
  qkv_buf_ = alloc_act(N * 3 * size_t(Ct_));
  atty_ = alloc_act(N * size_t(Ct_));
  fch_ = alloc_act(N * 4 * size_t(Ct_));
  fch_gelu_ = alloc_act(N * 4 * size_t(Ct_));
  mean_ = be_.alloc(N);
  rstd_ = be_.alloc(N);
  owned_.push_back(mean_);
  owned_.push_back(rstd_);
  gathered_ = alloc_act(size_t(tp.size) * N * size_t(Vt_));
  gathered_f32_ = be_.alloc(size_t(tp.size) * N * size_t(Vt_));
  owned_.push_back(gathered_f32_);
}

GptDecoder::~GptDecoder() {
  for (void* p : owned_) be_.release(p);
}

void GptDecoder::set_params(const float* host) {
  const size_t n = table_.total();
  if (compute_ == DType::f32) {
    be_.upload(static_cast<float*>(w_.data), host, n);
    return;
  }
  float* staging = be_.alloc(n);
  be_.upload(staging, host, n);
  be_.convert(w_, ConstTypedPtr(staging), n);
  be_.release(staging);
}

std::vector<float> GptDecoder::step(const int32_t* tokens, int n_new, bool all_positions) {
  const int C = shape_.d_model, T = shape_.seq_len;
  if (n_new <= 0) throw std::invalid_argument("GptDecoder::step: no new tokens");
  if (pos_ + n_new > T)
    throw std::length_error("the sequence would reach " + std::to_string(pos_ + n_new) +
                            " tokens, past the model's context of " + std::to_string(T) + " (model.seq_len)");
  const int N = B_ * n_new;
  const size_t NC = size_t(N) * C;
  be_.upload_i32(tokens_, tokens, size_t(N));
  auto W = [&](const std::string& name) { return w_ + table_.find(name).offset; };
  // Positions [pos_, pos_ + n_new): the rows of wpe from pos_ on.
  embed_.forward(x_, tokens_, W("wte"), W("wpe") + size_t(pos_) * C, B_, n_new);
  for (int l = 0; l < shape_.n_layer; ++l) {
    const BlockWeights w = BlockWeights::at(table_, w_, l);
    be_.layernorm_forward(ln_, mean_, rstd_, x_, w.ln1_w, w.ln1_b, N, C);
    qkv_.forward(qkv_buf_, ln_, w.qkv_w, w.qkv_b, N);
    be_.attention_cached(atty_, kcache_[size_t(l)], vcache_[size_t(l)], qkv_buf_, B_, n_new, pos_, T, Ct_, NHt_);
    attn_proj_.forward(proj_, atty_, w.attn_proj_w, w.attn_proj_b, N);
    be_.residual_forward(x_, x_, proj_, NC);
    be_.layernorm_forward(ln_, mean_, rstd_, x_, w.ln2_w, w.ln2_b, N, C);
    fc_.forward(fch_, ln_, w.fc_w, w.fc_b, N);
    be_.gelu_forward(fch_gelu_, fch_, size_t(N) * 4 * Ct_);
    mlp_proj_.forward(proj_, fch_gelu_, w.mlp_proj_w, w.mlp_proj_b, N);
    be_.residual_forward(x_, x_, proj_, NC);
  }
  pos_ += n_new;
  be_.layernorm_forward(ln_, mean_, rstd_, x_, W("ln_f.weight"), W("ln_f.bias"), N, C);
  // This rank's vocabulary columns of the rows wanted, into its part of the gather buffer.
  const int rows = all_positions ? N : B_;
  const TypedPtr mine = gathered_ + size_t(tp_.rank) * size_t(rows) * Vt_;
  if (all_positions) {
    head_.forward(mine, ln_, W("wte"), ConstTypedPtr(), N);
  } else {
    for (int b = 0; b < B_; ++b)
      head_.forward(mine + size_t(b) * Vt_, ln_ + (size_t(b) * n_new + size_t(n_new - 1)) * C, W("wte"),
                    ConstTypedPtr(), 1);
  }
  const size_t part = size_t(rows) * Vt_;
  if (tp_.size > 1) tp_.comm->all_gather(gathered_, std::vector<size_t>(size_t(tp_.size), part));
  be_.convert(TypedPtr(gathered_f32_), ConstTypedPtr(gathered_), part * tp_.size);
  std::vector<float> parts(part * tp_.size);
  be_.download(parts.data(), gathered_f32_, parts.size());
  // (tp, rows, Vt) -> (rows, V): rank r's columns are [r * Vt, (r + 1) * Vt) of the padded vocabulary.
  const int V = shape_.vocab;
  std::vector<float> out(size_t(rows) * V);
  for (int r = 0; r < tp_.size; ++r)
    for (int i = 0; i < rows; ++i)
      for (int j = 0; j < Vt_; ++j) {
        const int col = r * Vt_ + j;
        if (col < V) out[size_t(i) * V + col] = parts[(size_t(r) * rows + i) * Vt_ + j];
      }
  return out;
}

}  // namespace loom
