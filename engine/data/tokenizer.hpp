#pragma once
// Text -> token ids for `loom prep`, and back for `loom sample`. The byte tokenizer is built in (ids 0..255 are bytes, 256 is
// end-of-text: vocab 257); GPT-2's BPE reads the standard vocab.json + merges.txt.
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace loom {

class Tokenizer {
 public:
  virtual ~Tokenizer() = default;
  virtual std::string name() const = 0;
  virtual int vocab_size() const = 0;
  virtual int eot_id() const = 0;
  virtual void encode(std::string_view text, std::vector<uint32_t>& out) const = 0;  // appends
  // The bytes of token `id` (generated text is their concatenation; a multi-byte character may
  // span tokens). "" for an id outside the vocabulary.
  virtual std::string decode(uint32_t id) const = 0;
};

std::unique_ptr<Tokenizer> make_byte_tokenizer();
// Throws std::runtime_error naming the file if either is missing or malformed, or if the
// vocabulary has no "<|endoftext|>".
std::unique_ptr<Tokenizer> make_gpt2_tokenizer(const std::string& vocab_json, const std::string& merges_txt);

}  // namespace loom
