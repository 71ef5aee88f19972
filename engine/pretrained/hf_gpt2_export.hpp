#pragma once
// Weights out to a Hugging Face GPT-2 directory that transformers' GPT2LMHeadModel.from_pretrained
// loads: config.json, model.safetensors (names "transformer.*", Conv1D weights transposed to
// [in, out], the tied lm_head left out as save_pretrained does, metadata format "pt"), and the
// tokenizer's vocab.json + merges.txt when given.
#include <string>

#include "engine/pretrained/pretrained_source.hpp"

namespace loom {

struct HfExportOptions {
  std::string dtype = "F32";   // "F32" | "BF16": model.safetensors' dtype (config.json's torch_dtype)
  std::string vocab, merges;   // GPT-2 BPE files copied as vocab.json and merges.txt; "" none
};

// Writes the directory `out`, which must not exist (or be empty): everything goes into a sibling
// `out`.partial-XXXXXX first and is renamed into place complete, so a failure leaves nothing
// under `out`. The model's positions are the source's. Throws std::runtime_error naming the
// file at fault.
void export_hf_gpt2(const PretrainedSource& src, const std::string& out, const HfExportOptions& opt);

}  // namespace loom
