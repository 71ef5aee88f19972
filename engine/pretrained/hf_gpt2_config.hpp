#pragma once
// A Hugging Face GPT-2 directory's config.json, as Loom's model section. The keys GPT-2's config
// uses (transformers' GPT2Config): n_layer, n_head, n_embd, n_positions, vocab_size,
// layer_norm_epsilon, activation_function. Loom's GPT is GPT-2's architecture with its fixed
// LayerNorm eps 1e-5 and the tanh GELU ("gelu_new"), so a config asking for anything else is
// refused rather than imported into a model that computes something different.
#include <string>

#include "engine/config/recipe.hpp"

namespace loom {

struct HfGpt2Config {
  ModelConfig model;     // n_layer, n_head, d_model = n_embd, vocab_size, seq_len = n_positions
  double layer_norm_epsilon = 1e-5;
  std::string activation = "gelu_new";
};

// Reads DIR/config.json. Throws std::runtime_error naming the file and the key: a missing file or
// key, a value of the wrong type or out of range, n_embd not divisible by n_head, another
// activation or LayerNorm eps than Loom's.
HfGpt2Config read_hf_gpt2_config(const std::string& dir);

}  // namespace loom
