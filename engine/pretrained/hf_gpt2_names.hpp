#pragma once
// Loom's tensor names against Hugging Face GPT-2's (transformers' GPT2LMHeadModel), one table
// for import and export. HF names carry "transformer." when saved from GPT2LMHeadModel and not
// when saved from GPT2Model. GPT-2's attention and MLP weights are Conv1D modules, stored
// [in, out]: the transpose of Loom's (and torch.nn.Linear's) [out, in]. lm_head.weight is the
// token embedding itself (tied), which safetensors files leave out.
#include <string>

namespace loom {

struct HfTensorName {
  std::string name;         // without the "transformer." prefix, e.g. "h.3.attn.c_attn.weight"
  bool transposed = false;  // stored [in, out]
};

// The HF name of Loom's global tensor `loom_name` ("wte", "h.3.attn.qkv.weight", ...). Throws
// std::invalid_argument for a name Loom's GPT does not have.
HfTensorName hf_gpt2_name(const std::string& loom_name);

}  // namespace loom
