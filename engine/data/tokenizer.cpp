#include "engine/data/tokenizer.hpp"

#include <stdexcept>

#include "engine/data/gpt2_bpe.hpp"

namespace loom {
namespace {

class ByteTokenizer final : public Tokenizer {
 public:
  std::string name() const override { return "byte"; }
  int vocab_size() const override { return 257; }
  int eot_id() const override { return 256; }
  void encode(std::string_view text, std::vector<uint32_t>& out) const override {
    for (unsigned char c : text) out.push_back(c);
  }
  std::string decode(uint32_t id) const override {
    if (id < 256) return std::string(1, char(id));
    return id == 256 ? "<|endoftext|>" : "";
  }
};

class Gpt2Tokenizer final : public Tokenizer {
 public:
  Gpt2Tokenizer(const std::string& vocab, const std::string& merges) : bpe_(vocab, merges) {
    if (bpe_.eot_id() < 0) throw std::runtime_error(vocab + ": the vocabulary has no \"<|endoftext|>\" token");
  }
  std::string name() const override { return "gpt2"; }
  int vocab_size() const override { return bpe_.vocab_size(); }
  int eot_id() const override { return bpe_.eot_id(); }
  void encode(std::string_view text, std::vector<uint32_t>& out) const override { bpe_.encode(text, out); }
  std::string decode(uint32_t id) const override { return bpe_.decode(id); }

 private:
  Gpt2Bpe bpe_;
};

}  // namespace

std::unique_ptr<Tokenizer> make_byte_tokenizer() { return std::make_unique<ByteTokenizer>(); }
std::unique_ptr<Tokenizer> make_gpt2_tokenizer(const std::string& vocab_json, const std::string& merges_txt) {
  return std::make_unique<Gpt2Tokenizer>(vocab_json, merges_txt);
}

}  // namespace loom
