#pragma once
// `loom prep`: text files -> Loom token shards + manifest.json, streaming (memory stays bounded
// whatever the corpus size). Documents are whole files, or the pieces between lines equal to
// `doc_separator`; each document is preceded by the end-of-text token. A seeded hash of the
// document number sends a `val_fraction` of the documents to the validation split.
#include <cstdint>
#include <string>
#include <vector>

namespace loom {

struct PrepOptions {
  std::string tokenizer = "byte";  // byte | gpt2
  std::string vocab, merges;       // gpt2 only
  std::string out;
  std::vector<std::string> inputs;
  double val_fraction = 0.0;
  std::string doc_separator;       // empty: every file is one document
  uint64_t shard_tokens = 100'000'000;
  uint64_t seed = 1337;
};

struct PrepSummary {
  uint64_t train_tokens = 0, val_tokens = 0, documents = 0, val_documents = 0, input_bytes = 0;
  double seconds = 0;
};

// Throws std::runtime_error naming the file or option at fault.
PrepSummary run_prep(const PrepOptions& o);

}  // namespace loom
