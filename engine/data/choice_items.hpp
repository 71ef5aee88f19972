#pragma once
// Multiple-choice evaluation items (HellaSwag, MMLU, ...) for `loom eval --choices`: a context and
// several candidate endings, one of them right. Two file forms:
//   - llm.c's eval file (dev/data/hellaswag.py, mmlu.py: `write_evalfile`), already tokenized with
//     GPT-2: 256 int32 header words (magic 20240522, version 1, examples, longest example in
//     bytes), then per example a stream of uint16: 65535, its bytes, its index, the label, the
//     number of endings, the context's length and tokens, each ending's length and tokens;
//   - HellaSwag's own JSON lines ({"ctx": ..., "endings": [...], "label": N}), tokenized here as
//     llm.c and nanoGPT do it: the context as it is, each ending with a space before it.
// Errors name the file and the example (its number, or its line for JSON lines).
#include <cstdint>
#include <string>
#include <vector>

#include "engine/data/token_dataset.hpp"
#include "engine/data/tokenizer.hpp"

namespace loom {

struct ChoiceItem {
  int64_t index = 0;  // the file's example number (llm.c's <EXAMPLE_INDEX>, the JSON line's 0-based number)
  int label = 0;      // which ending is right
  std::vector<int32_t> context;
  std::vector<std::vector<int32_t>> endings;
};

constexpr int32_t kLlmcEvalMagic = 20240522;

// True if `path` starts with llm.c's eval-file magic; throws "`key` PATH: cannot be read: ..."
// when it cannot be opened (before anything asks for a tokenizer it would not need).
bool is_llmc_eval_file(const std::string& path, const std::string& key = "--choices");

// Every item of `path`: an llm.c eval file, or JSON lines tokenized by `tok` (null: the error
// says a tokenizer is needed). Each token must be below `vocab_size`, the label must name an
// ending, every ending and the context must be non-empty. Errors start "`key` PATH: ".
std::vector<ChoiceItem> read_choice_items(const std::string& path, const Tokenizer* tok, int vocab_size,
                                          const std::string& key = "--choices");

// The items as a dataset's fingerprint (token count, CRC-32C of every label, length and token):
// every rank must score the same items (a node's own copy that differs would score others, or
// run other numbers of forwards than its pipeline or ZeRO partners).
DataFingerprint choice_items_fingerprint(const std::vector<ChoiceItem>& items);

}  // namespace loom
