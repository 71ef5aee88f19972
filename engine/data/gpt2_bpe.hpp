#pragma once
// GPT-2's byte-level BPE: the algorithm of OpenAI's gpt-2/src/encoder.py (Encoder.encode), read
// from the standard vocab.json + merges.txt. Checked id-for-id against a Python re-implementation
// of encoder.py by tests/unit/test_gpt2_bpe.cpp (golden data: scripts/make_bpe_golden.py).
//
// Not thread-safe: encode() fills a per-object cache and PCRE2 match data, so one object must be
// used by one thread at a time (give each worker thread its own Gpt2Bpe).
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace loom {

class Gpt2Bpe {
 public:
  // Throws std::runtime_error naming the file and what is wrong: a missing/unreadable file, bad
  // JSON, a vocab that is not an object of {token: non-negative integer id}, an id used twice, a
  // byte symbol missing from the vocab, a non-empty merges line that is not two tokens, or a merge
  // whose parts or result are absent from the vocab. A first merges line starting "#version" is
  // skipped (encoder.py skips line 1 unconditionally); empty lines are skipped; a repeated merge
  // takes its later rank (as encoder.py's dict does).
  Gpt2Bpe(const std::string& vocab_json_path, const std::string& merges_txt_path);
  ~Gpt2Bpe();
  Gpt2Bpe(Gpt2Bpe&&) noexcept;
  Gpt2Bpe& operator=(Gpt2Bpe&&) noexcept;

  // Appends the token ids of `text` to `out`. `text` is UTF-8; "<|endoftext|>" inside it is
  // ordinary text (the caller inserts eot_id() between documents).
  // Invalid UTF-8 is encoded as Python would encode text.decode("utf-8", "surrogateescape"):
  // each byte that is not part of a valid sequence (strict: no overlongs, surrogates or code
  // points above U+10FFFF) stands for one character of its own that is neither \s, \p{L} nor
  // \p{N}, so it joins runs of punctuation; its piece keeps the original byte.
  void encode(std::string_view text, std::vector<uint32_t>& out) const;

  // The bytes token `id` stands for ("" for an id the vocab does not have): a generated sequence
  // decodes to the concatenation of its tokens' bytes, as encoder.py's decode does.
  const std::string& decode(uint32_t id) const {
    static const std::string none;
    return id < token_bytes_.size() ? token_bytes_[id] : none;
  }

  int vocab_size() const { return vocab_size_; }  // max id + 1
  int eot_id() const { return eot_id_; }          // id of "<|endoftext|>", or -1 if absent

 private:
  struct Pattern;  // the compiled pre-tokenising regex (PCRE2), defined in the .cpp
  struct Merge {
    uint32_t rank;    // line order in merges.txt, lowest applies first
    uint32_t merged;  // vocab id of the concatenated symbol
  };
  struct StringHash {
    using is_transparent = void;
    size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
  };

  // Appends the ids of one pre-tokenised piece (its raw bytes), through the cache.
  void encode_piece(std::string_view piece, std::vector<uint32_t>& out) const;
  // encoder.py's bpe() on the piece's byte symbols, in O(n log n); appends the resulting ids.
  void bpe(std::string_view piece, std::vector<uint32_t>& out) const;

  std::unique_ptr<Pattern> pattern_;
  std::vector<std::string> token_bytes_;          // decode(): by id
  uint32_t byte_id_[256];                         // vocab id of bytes_to_unicode()[b]
  std::unordered_map<uint64_t, Merge> merges_;    // key: (left id << 32) | right id
  int vocab_size_ = 0;
  int eot_id_ = -1;

  // Per-piece results keyed by the piece's bytes; cleared whenever it reaches kCacheEntries.
  // Pieces longer than kCacheMaxBytes are not kept: they seldom recur, and a megabyte-long run
  // would pin its bytes and ids until the next clear.
  static constexpr size_t kCacheEntries = 1 << 17;
  static constexpr size_t kCacheMaxBytes = 256;
  mutable std::unordered_map<std::string, std::vector<uint32_t>, StringHash, std::equal_to<>> cache_;
  struct PairAt {  // a candidate merge in bpe(): the pair (left, right) at symbol `pos`, and its result
    uint32_t rank, pos, left, right, merged;
  };
  // Scratch for bpe(): each byte's symbol (merged into the leftmost byte of its span), the linked
  // list of the symbols still standing, the candidate heap and the pairs one round creates.
  mutable std::vector<uint32_t> word_, next_, prev_;
  mutable std::vector<PairAt> heap_, created_;
  static constexpr size_t kScratchKeepBytes = 1 << 16;  // scratch of longer pieces is freed after them
  mutable std::string subject_, piece_;  // scratch for invalid-UTF-8 input
};

}  // namespace loom
