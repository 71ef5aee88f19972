#pragma once
// The tokenizer a dataset was made with, as its `loom prep` manifest records it ("tokenizer":
// byte | gpt2, and GPT-2's "tokenizer_files"), for what must tokenize text for a model trained
// on it: `loom sample` and `loom eval` on a checkpoint (through its run's data.train), and
// multiple-choice items in JSON lines during training (log.choices).
#include <memory>
#include <string>

#include "engine/data/tokenizer.hpp"

namespace loom {

struct TokenizerSpec {
  std::string kind;           // "gpt2" | "byte" | "" (unknown)
  std::string vocab, merges;  // gpt2: vocab.json and merges.txt
};

// The tokenizer of data.train's value `train`: a `loom prep` directory, or a blend of them (its
// first part's: opening a blend checks that its parts agree). {} when unknown (shard files, other
// formats, no manifest).
TokenizerSpec dataset_tokenizer(const std::string& train);

// Throws std::runtime_error when `s.kind` is gpt2 without both files, or unknown.
std::unique_ptr<Tokenizer> make_tokenizer(const TokenizerSpec& s);

}  // namespace loom
