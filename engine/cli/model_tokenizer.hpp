#pragma once
// Which tokenizer a model was trained with, for `loom sample` (text in and out) and `loom export`
// (the tokenizer files an HF directory carries).
#include <memory>
#include <string>

#include "engine/data/dataset_tokenizer.hpp"
#include "engine/data/tokenizer.hpp"
#include "engine/pretrained/pretrained_source.hpp"

namespace loom::cli {

using ModelTokenizer = TokenizerSpec;  // kind gpt2 | byte | "" (unknown), and GPT-2's files

// A Loom checkpoint: the tokenizer of its run's data.train (a `loom prep` directory's manifest);
// a Hugging Face directory: its vocab.json + merges.txt if present; otherwise a 257-token
// vocabulary is taken for Loom's byte tokenizer, and anything else is unknown.
ModelTokenizer model_tokenizer(const PretrainedSource& src);

// The tokenizer to use with `src`: `kind` ("" for the model's own, byte, gpt2) and `vocab` +
// `merges` (GPT-2 BPE's files; given alone they mean gpt2) as the command line said, else the
// model's. Throws naming the options to give when it cannot tell (`or_else`: the way round a
// tokenizer the command offers, e.g. "--prompt-tokens"; "" for none).
std::unique_ptr<Tokenizer> make_model_tokenizer(const PretrainedSource& src, const std::string& kind,
                                                const std::string& vocab, const std::string& merges,
                                                const std::string& or_else);

}  // namespace loom::cli
