#pragma once
// The shape of a GPT-2-style model, and the FLOPs it costs.
#include <cstdint>

namespace loom {

// Which part of the model a pipeline stage holds: blocks [first_layer, first_layer + n_layers),
// the embedding if it is the first stage, ln_f + head + loss if it is the last. The default,
// n_layers = -1, is the whole model.
struct StageSpec {
  int first_layer = 0, n_layers = -1;
  bool first = true, last = true;
};

// LoRA (Hu et al. 2021): each targeted linear layer W (OC, C) gains a trainable low-rank branch,
// y = x W^T + b + (alpha / rank) * (x A^T) B^T with A (rank, C) and B (OC, rank), B starting at
// zero so that training starts from the base model. With rank > 0 the base weights are frozen
// (no gradients, no optimizer state) and only the adapters (and, if asked, the embeddings and
// LayerNorms) train. rank 0: no adapters, everything trains.
struct LoraSpec {
  int rank = 0;
  double alpha = 16;
  bool qkv = true, attn_proj = true, fc = true, mlp_proj = true;  // the targets
  bool train_embeddings = false, train_layernorm = false;
  // QLoRA: the frozen base's block weights (qkv, attn.proj, mlp.fc, mlp.proj) stored blockwise-
  // quantized (0 none, 1 int8, 2 NF4; kernels/quantize.hpp), `quant_block` elements per scale, and
  // dequantized just before use. Storage only: not part of the parameters' identity (==).
  int quantize = 0;
  int quant_block = 64;
  // Dropout on each adapter's input while training (a hyperparameter, not part of ==): the mask
  // is a function of the seed the trainer gives each micro-batch (Gpt::set_dropout_seed).
  float dropout = 0;
  bool on() const { return rank > 0; }
  double scale() const { return rank > 0 ? alpha / rank : 0.0; }
  bool operator==(const LoraSpec& o) const {
    return rank == o.rank && alpha == o.alpha && qkv == o.qkv && attn_proj == o.attn_proj && fc == o.fc &&
           mlp_proj == o.mlp_proj && train_embeddings == o.train_embeddings && train_layernorm == o.train_layernorm;
  }
};

struct GptShape {
  int n_layer = 0;     // L
  int n_head = 0;      // NH
  int d_model = 0;     // C
  int vocab = 0;       // V: real token ids are [0, V)
  int vocab_pad = 0;   // Vp: V rounded up to a multiple of 128 (embedding rows / logits columns)
  int seq_len = 0;     // T
  LoraSpec lora;       // adapters (off by default)

  static GptShape make(int n_layer, int n_head, int d_model, int vocab, int seq_len, int vocab_multiple = 128) {
    GptShape s{n_layer, n_head, d_model, vocab, 0, seq_len, LoraSpec{}};
    s.vocab_pad = (vocab + vocab_multiple - 1) / vocab_multiple * vocab_multiple;
    return s;
  }
  int head_size() const { return d_model / n_head; }

  // Parameters that take part in matmuls, counting the tied LM head once as V*C: the N of the
  // model-FLOPs formula. Embedding lookups, biases and LayerNorms are excluded.
  int64_t matmul_params() const {
    const int64_t C = d_model;
    return int64_t(n_layer) * 12 * C * C + int64_t(vocab) * C;
  }
  // LoRA adapters' parameters (all take part in matmuls).
  int64_t adapter_params() const {
    if (!lora.on()) return 0;
    const int64_t C = d_model, r = lora.rank;
    const int64_t per_layer = (lora.qkv ? r * (C + 3 * C) : 0) + (lora.attn_proj ? r * 2 * C : 0) +
                              (lora.fc ? r * 5 * C : 0) + (lora.mlp_proj ? r * 5 * C : 0);
    return int64_t(n_layer) * per_layer;
  }
  // Model FLOPs of forward + backward per token: 6 N + 12 L C T (PaLM appendix B / nanoGPT).
  // The attention term counts the full T x T scores (not halved for the causal mask). With LoRA a
  // frozen weight costs 4 per token (forward and the input gradient, no weight gradient), the
  // adapters 6, and a trainable embedding's head its weight gradient too.
  double flops_per_token() const {
    const double attention = 12.0 * n_layer * double(d_model) * seq_len;
    if (!lora.on()) return 6.0 * double(matmul_params()) + attention;
    const double head_dw = lora.train_embeddings ? 2.0 * double(vocab) * d_model : 0.0;
    return 4.0 * double(matmul_params()) + head_dw + 6.0 * double(adapter_params()) + attention;
  }
};

}  // namespace loom
