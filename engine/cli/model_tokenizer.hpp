#pragma once
// Which tokenizer a model was trained with, for `loom sample` (text in and out) and `loom export`
// (the tokenizer files an HF directory carries).
#include <string>

#include "engine/pretrained/pretrained_source.hpp"

namespace loom::cli {

struct ModelTokenizer {
  std::string kind;           // "gpt2" | "byte" | "" (unknown)
  std::string vocab, merges;  // gpt2: vocab.json and merges.txt
};

// A Loom checkpoint: the tokenizer of its run's data.train (a `loom prep` directory's manifest);
// a Hugging Face directory: its vocab.json + merges.txt if present; otherwise a 257-token
// vocabulary is taken for Loom's byte tokenizer, and anything else is unknown.
ModelTokenizer model_tokenizer(const PretrainedSource& src);

}  // namespace loom::cli
