#pragma once
// `loom prep`: text files -> Loom token shards + manifest.json, streaming (memory stays bounded
// whatever the corpus size). Documents are whole files, or the pieces between lines equal to
// `doc_separator`, or with `json_key` the string at that key of each line's JSON object (JSON
// lines, as Megatron's preprocess_data.py --json-keys reads them); each document is preceded by
// the end-of-text token. A seeded hash of the
// document number sends a `val_fraction` of the documents to the validation split.
#include <cstdint>
#include <string>
#include <vector>

namespace loom {

struct PrepOptions {
  std::string tokenizer = "byte";  // byte | gpt2
  std::string vocab, merges;       // gpt2 only
  std::string out;
  // Without `force`, `out` must not exist or be an empty directory. With it, a non-empty `out` is
  // replaced. Either way the dataset is written into a sibling OUT.partial-XXXXXX and renamed
  // into place only once complete (with `force`, swapped with the old one, which is then removed).
  bool force = false;
  std::string check;  // CLI only: `loom prep --check DIR` (check_prepared_dir) instead of a prep
  std::vector<std::string> inputs;
  double val_fraction = 0.0;
  std::string doc_separator;       // empty: every file is one document
  std::string json_key;            // set: JSON lines, each object's string at this key one document
  uint64_t shard_tokens = 100'000'000;
  uint64_t seed = 1337;
};

struct PrepSummary {
  uint64_t train_tokens = 0, val_tokens = 0, documents = 0, val_documents = 0, input_bytes = 0;
  double seconds = 0;
  bool replaced = false;  // `out` held something, now replaced (--force)
};

// Throws std::runtime_error naming the file or option at fault. Input files (and the GPT-2
// vocab/merges) must be regular files: a FIFO, socket or device is refused, never opened.
PrepSummary run_prep(const PrepOptions& o);

// `loom prep --check DIR`: every shard the manifest lists, opened (header, size) and checksummed.
struct ShardCheck {
  std::string split, file;  // file: name within the directory
  bool ok = false;
  std::string detail;       // "N tokens, CRC-32C 0x..." or what is wrong
};
struct PreparedDirCheck {
  std::vector<ShardCheck> shards;
  std::vector<std::string> unlisted;  // *.bin files the manifest does not list (ignored by training)
  bool ok() const;
};
// Throws std::runtime_error when DIR has no readable manifest.json.
PreparedDirCheck check_prepared_dir(const std::string& dir);

}  // namespace loom
