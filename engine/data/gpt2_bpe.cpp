#include "engine/data/gpt2_bpe.hpp"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include <algorithm>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>
#include <sstream>
#include <stdexcept>
#include <utility>

namespace loom {
namespace {

// GPT-2's pattern, 's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+, with
// \s spelled out as the White_Space set of Python's `regex` module (what encoder.py uses): PCRE2's
// UCP \s also matches U+180E, which Unicode >= 6.3 and `regex` do not count as space.
// \p{L} and \p{N} come from PCRE2's Unicode tables (10.42: Unicode 14); letters and digits added
// in later Unicode versions may split differently from a newer `regex`.
const std::string kSpace =
    R"(\x{09}-\x{0D}\x{20}\x{85}\x{A0}\x{1680}\x{2000}-\x{200A}\x{2028}\x{2029}\x{202F}\x{205F}\x{3000})";
const std::string kPattern = R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^)" + kSpace + R"(\p{L}\p{N}]+|[)" +
                             kSpace + "]+(?![^" + kSpace + "])|[" + kSpace + "]+";

// What stands in the regex subject for a byte that is not valid UTF-8: U+FFFD, which like the lone
// surrogate Python's "surrogateescape" makes of it is neither \s, \p{L} nor \p{N}.
constexpr char kEscape[] = "\xEF\xBF\xBD";
constexpr size_t kEscapeLen = 3;

// OpenAI's bytes_to_unicode(): printable Latin-1 bytes map to themselves, the other 68 bytes to
// U+0100.. in byte order.
bool printable_latin1(int b) { return (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF); }
uint32_t byte_to_unicode(int b) {
  if (printable_latin1(b)) return uint32_t(b);
  uint32_t n = 0;
  for (int x = 0; x < b; ++x) n += !printable_latin1(x);
  return 256 + n;
}

void append_utf8(uint32_t cp, std::string& s) {
  if (cp < 0x80) {
    s += char(cp);
  } else if (cp < 0x800) {
    s += char(0xC0 | (cp >> 6));
    s += char(0x80 | (cp & 0x3F));
  } else {  // bytes_to_unicode never goes past U+0143
    s += char(0xE0 | (cp >> 12));
    s += char(0x80 | ((cp >> 6) & 0x3F));
    s += char(0x80 | (cp & 0x3F));
  }
}

// Length of the valid UTF-8 sequence starting at s[i], or 0 if none starts there. Python's strict
// decoder rules (Unicode Table 3-7): no overlongs, no surrogates, nothing above U+10FFFF. Marking
// one byte invalid and retrying at the next gives the same invalid bytes as Python's maximal-
// subpart error ranges, since the rest of such a range is continuation bytes.
size_t utf8_len(const unsigned char* s, size_t i, size_t n) {
  const unsigned c = s[i];
  auto cont = [&](size_t k, unsigned lo, unsigned hi) { return i + k < n && s[i + k] >= lo && s[i + k] <= hi; };
  if (c < 0x80) return 1;
  if (c >= 0xC2 && c <= 0xDF) return cont(1, 0x80, 0xBF) ? 2 : 0;
  if (c >= 0xE0 && c <= 0xEF)
    return cont(1, c == 0xE0 ? 0xA0 : 0x80, c == 0xED ? 0x9F : 0xBF) && cont(2, 0x80, 0xBF) ? 3 : 0;
  if (c >= 0xF0 && c <= 0xF4)
    return cont(1, c == 0xF0 ? 0x90 : 0x80, c == 0xF4 ? 0x8F : 0xBF) && cont(2, 0x80, 0xBF) && cont(3, 0x80, 0xBF)
               ? 4
               : 0;
  return 0;
}

// Offset of the first byte of `text` that starts no valid UTF-8 sequence, or text.size().
size_t first_invalid_utf8(std::string_view text) {
  const auto* s = reinterpret_cast<const unsigned char*>(text.data());
  const size_t n = text.size();
  size_t i = 0;
  while (i < n) {
    if (s[i] < 0x80) {
      ++i;
      continue;
    }
    const size_t len = utf8_len(s, i, n);
    if (len == 0) return i;
    i += len;
  }
  return n;
}

std::string read_file(const std::string& path, const char* what) {
  std::ifstream f(path, std::ios::binary);
  if (!f) throw std::runtime_error(path + ": cannot open the " + what);
  std::ostringstream ss;
  ss << f.rdbuf();
  if (f.bad()) throw std::runtime_error(path + ": cannot read the " + what);
  return ss.str();
}

std::string pcre2_message(int code) {
  PCRE2_UCHAR buf[256];
  pcre2_get_error_message(code, buf, sizeof(buf));
  return reinterpret_cast<const char*>(buf);
}

}  // namespace

struct Gpt2Bpe::Pattern {
  pcre2_code* code = nullptr;
  pcre2_match_data* match = nullptr;
  pcre2_match_context* context = nullptr;
  pcre2_jit_stack* jit_stack = nullptr;
  bool jit = false;  // JIT-compiled (PCRE2 built with JIT support): matched with pcre2_jit_match

  Pattern() {
    int err = 0;
    PCRE2_SIZE at = 0;
    code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(kPattern.data()), kPattern.size(), PCRE2_UTF | PCRE2_UCP, &err,
                         &at, nullptr);
    if (!code)
      throw std::runtime_error("Gpt2Bpe: cannot compile the GPT-2 pattern at offset " + std::to_string(at) + ": " +
                               pcre2_message(err));
    match = pcre2_match_data_create_from_pattern(code, nullptr);
    context = pcre2_match_context_create(nullptr);
    jit = pcre2_jit_compile(code, PCRE2_JIT_COMPLETE) == 0;
    if (jit) {
      jit_stack = pcre2_jit_stack_create(32 * 1024, 1024 * 1024, nullptr);
      pcre2_jit_stack_assign(context, nullptr, jit_stack);
    }
  }
  ~Pattern() {
    pcre2_jit_stack_free(jit_stack);
    pcre2_match_context_free(context);
    pcre2_match_data_free(match);
    pcre2_code_free(code);
  }
  Pattern(const Pattern&) = delete;
  Pattern& operator=(const Pattern&) = delete;

  // Matches at or after `pos` of the valid UTF-8 `subject`; returns [start, end) or throws.
  std::pair<size_t, size_t> next(std::string_view subject, size_t pos) {
    const auto* s = reinterpret_cast<PCRE2_SPTR>(subject.data());
    const int rc = jit ? pcre2_jit_match(code, s, subject.size(), pos, 0, match, context)
                       : pcre2_match(code, s, subject.size(), pos, PCRE2_NO_UTF_CHECK, match, context);
    if (rc < 0) throw std::runtime_error("Gpt2Bpe::encode: PCRE2 match failed: " + pcre2_message(rc));
    const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(match);
    return {ov[0], ov[1]};
  }
};

Gpt2Bpe::Gpt2Bpe(const std::string& vocab_json_path, const std::string& merges_txt_path)
    : pattern_(std::make_unique<Pattern>()) {
  const std::string& vp = vocab_json_path;
  nlohmann::json vocab_json;
  try {
    vocab_json = nlohmann::json::parse(read_file(vp, "vocab file"));
  } catch (const nlohmann::json::exception& e) {
    throw std::runtime_error(vp + ": not valid JSON: " + e.what());
  }
  if (!vocab_json.is_object())
    throw std::runtime_error(vp + ": expected a JSON object {token: id}, got " + std::string(vocab_json.type_name()));

  std::unordered_map<std::string, uint32_t, StringHash, std::equal_to<>> vocab;
  std::unordered_map<uint32_t, std::string> token_of;
  for (const auto& [token, id] : vocab_json.items()) {
    const bool ok = id.is_number_unsigned() ||
                    (id.is_number_integer() && id.get<int64_t>() >= 0);
    if (!ok || id.get<uint64_t>() > uint64_t(std::numeric_limits<int32_t>::max() - 1))
      throw std::runtime_error(vp + ": token \"" + token + "\" has id " + id.dump() +
                               ", expected a non-negative integer below 2^31-1");
    const uint32_t v = id.get<uint32_t>();
    if (auto [it, fresh] = token_of.emplace(v, token); !fresh)
      throw std::runtime_error(vp + ": id " + std::to_string(v) + " is used by both \"" + it->second + "\" and \"" +
                               token + "\"");
    vocab.emplace(token, v);
    vocab_size_ = std::max(vocab_size_, int(v) + 1);
  }
  if (auto it = vocab.find(std::string_view("<|endoftext|>")); it != vocab.end()) eot_id_ = int(it->second);

  for (int b = 0; b < 256; ++b) {
    std::string sym;
    append_utf8(byte_to_unicode(b), sym);
    auto it = vocab.find(sym);
    if (it == vocab.end())
      throw std::runtime_error(vp + ": the symbol \"" + sym + "\" of byte " + std::to_string(b) +
                               " is not in the vocab (not a GPT-2 byte-level vocab?)");
    byte_id_[b] = it->second;
  }
  // decode(): each token's symbols (code points of bytes_to_unicode) back to their bytes.
  std::unordered_map<uint32_t, char> byte_of;
  for (int b = 0; b < 256; ++b) byte_of[byte_to_unicode(b)] = char(b);
  token_bytes_.assign(size_t(vocab_size_), std::string());
  for (const auto& [token, id] : vocab) {
    std::string bytes;
    const auto* u = reinterpret_cast<const unsigned char*>(token.data());
    for (size_t i = 0; i < token.size();) {
      uint32_t cp = u[i];
      size_t len = cp < 0x80 ? 1 : cp < 0xE0 ? 2 : cp < 0xF0 ? 3 : 4;
      if (len > 1) cp &= (0xFF >> (len + 1));
      for (size_t k = 1; k < len && i + k < token.size(); ++k) cp = (cp << 6) | (u[i + k] & 0x3F);
      i += len;
      auto b = byte_of.find(cp);
      if (b != byte_of.end()) bytes += b->second;
      else append_utf8(cp, bytes);  // not a byte symbol ("<|endoftext|>"'s letters are): as written
    }
    token_bytes_[id] = std::move(bytes);
  }

  const std::string& mp = merges_txt_path;
  const std::string merges_text = read_file(mp, "merges file");
  std::istringstream lines(merges_text);
  std::string line;
  uint32_t rank = 0;
  for (int line_no = 1; std::getline(lines, line); ++line_no) {
    if (line_no == 1 && line.rfind("#version", 0) == 0) continue;
    std::istringstream fields(line);
    std::vector<std::string> parts;
    for (std::string f; fields >> f;) parts.push_back(f);
    if (parts.empty()) continue;
    const std::string where = mp + ":" + std::to_string(line_no) + ": ";
    if (parts.size() != 2)
      throw std::runtime_error(where + "expected a merge of two space-separated symbols, got " +
                               std::to_string(parts.size()) + " in \"" + line + "\"");
    uint32_t ids[3];
    const std::string syms[3] = {parts[0], parts[1], parts[0] + parts[1]};
    for (int k = 0; k < 3; ++k) {
      auto it = vocab.find(syms[k]);
      if (it == vocab.end())
        throw std::runtime_error(where + "merge \"" + line + "\": " + (k == 2 ? "its result \"" : "the symbol \"") +
                                 syms[k] + "\" is not in the vocab " + vp);
      ids[k] = it->second;
    }
    merges_.insert_or_assign((uint64_t(ids[0]) << 32) | ids[1], Merge{rank++, ids[2]});
  }
}

Gpt2Bpe::~Gpt2Bpe() = default;
Gpt2Bpe::Gpt2Bpe(Gpt2Bpe&&) noexcept = default;
Gpt2Bpe& Gpt2Bpe::operator=(Gpt2Bpe&&) noexcept = default;

void Gpt2Bpe::encode(std::string_view text, std::vector<uint32_t>& out) const {
  // Valid UTF-8 is matched in place. Otherwise the subject is a copy with kEscape in place of each
  // invalid byte; `escapes` holds (offset in the copy, original byte), ascending.
  std::string_view subject = text;
  std::vector<std::pair<size_t, unsigned char>> escapes;
  if (size_t bad = first_invalid_utf8(text); bad < text.size()) {
    const auto* s = reinterpret_cast<const unsigned char*>(text.data());
    subject_.assign(text.substr(0, bad));
    for (size_t i = bad; i < text.size();) {
      const size_t len = utf8_len(s, i, text.size());
      if (len == 0) {
        escapes.emplace_back(subject_.size(), s[i]);
        subject_.append(kEscape, kEscapeLen);
        ++i;
      } else {
        subject_.append(text.substr(i, len));
        i += len;
      }
    }
    subject = subject_;
  }

  for (size_t pos = 0; pos < subject.size();) {
    const auto [start, end] = pattern_->next(subject, pos);
    // Every character is \s, \p{L}, \p{N} or none of them, so the pieces tile the subject.
    if (start != pos) throw std::logic_error("Gpt2Bpe::encode: the GPT-2 pattern skipped input bytes");
    auto e = std::lower_bound(escapes.begin(), escapes.end(), std::make_pair(start, (unsigned char)0));
    if (e == escapes.end() || e->first >= end) {
      encode_piece(subject.substr(start, end - start), out);
    } else {
      piece_.clear();
      for (size_t i = start; i < end;) {
        if (e != escapes.end() && e->first == i) {
          piece_ += char(e->second);
          i += kEscapeLen;
          ++e;
        } else {
          piece_ += subject[i++];
        }
      }
      encode_piece(piece_, out);
    }
    pos = end;
  }
}

void Gpt2Bpe::encode_piece(std::string_view piece, std::vector<uint32_t>& out) const {
  if (piece.size() == 1) {
    out.push_back(byte_id_[static_cast<unsigned char>(piece[0])]);
    return;
  }
  if (auto it = cache_.find(piece); it != cache_.end()) {
    out.insert(out.end(), it->second.begin(), it->second.end());
    return;
  }
  const size_t first = out.size();
  bpe(piece, out);
  if (piece.size() > kCacheMaxBytes) return;
  if (cache_.size() >= kCacheEntries) cache_.clear();
  cache_.emplace(std::string(piece), std::vector<uint32_t>(out.begin() + first, out.end()));
}

void Gpt2Bpe::bpe(std::string_view piece, std::vector<uint32_t>& out) const {
  // encoder.py's loop: take the adjacent pair of lowest rank, merge all its occurrences left to
  // right (non-overlapping), repeat until no adjacent pair is a merge or one symbol is left.
  // Rescanning the word per merge, as encoder.py does, is quadratic: a 64 KB run of letters (a DNA
  // sequence, a minified blob) took 2 s and a megabyte would take minutes. Here the candidate
  // pairs sit in a min-heap ordered by (rank, position) and the symbols in a linked list, which
  // gives the same result in O(n log n):
  //  - one round pops every entry of the lowest rank r, in position order, which is encoder.py's
  //    left-to-right pass; an entry whose symbols have changed since it was pushed is skipped;
  //  - the pairs a merge creates are pushed only when the round ends: one of them may rank below
  //    r, and must not be merged before the round's remaining occurrences of r. None of them is
  //    of rank r itself (a merged symbol is longer than either of its parts), so no occurrence of
  //    r is missed either.
  const size_t n = piece.size();
  constexpr uint32_t kNone = std::numeric_limits<uint32_t>::max();
  if (n == 0) return;
  if (n >= kNone)
    throw std::runtime_error("Gpt2Bpe::encode: a run of " + std::to_string(n) +
                             " bytes of one character class (letters, digits, spaces or punctuation) is too long: "
                             "the limit is 4 GiB");
  word_.resize(n);
  next_.resize(n);
  prev_.resize(n);
  for (size_t i = 0; i < n; ++i) {
    word_[i] = byte_id_[static_cast<unsigned char>(piece[i])];
    next_[i] = i + 1 < n ? uint32_t(i + 1) : kNone;
    prev_[i] = i > 0 ? uint32_t(i - 1) : kNone;
  }
  // The min-heap's order: std::*_heap keep the greatest on top, so "greater" puts the least there.
  auto later = [](const PairAt& a, const PairAt& b) { return a.rank != b.rank ? a.rank > b.rank : a.pos > b.pos; };
  auto candidate = [&](uint32_t pos, std::vector<PairAt>& into) {
    const uint32_t q = next_[pos];
    if (q == kNone) return;
    auto it = merges_.find((uint64_t(word_[pos]) << 32) | word_[q]);
    if (it != merges_.end()) into.push_back({it->second.rank, pos, word_[pos], word_[q], it->second.merged});
  };
  heap_.clear();
  for (size_t i = 0; i + 1 < n; ++i) candidate(uint32_t(i), heap_);
  std::make_heap(heap_.begin(), heap_.end(), later);
  while (!heap_.empty()) {
    const uint32_t rank = heap_.front().rank;
    created_.clear();
    while (!heap_.empty() && heap_.front().rank == rank) {
      std::pop_heap(heap_.begin(), heap_.end(), later);
      const PairAt e = heap_.back();
      heap_.pop_back();
      const uint32_t p = e.pos, q = next_[p];
      if (word_[p] != e.left || q == kNone || word_[q] != e.right) continue;  // stale: merged since
      word_[p] = e.merged;
      word_[q] = kNone;  // symbol q is now part of p
      next_[p] = next_[q];
      if (next_[q] != kNone) prev_[next_[q]] = p;
      if (prev_[p] != kNone) candidate(prev_[p], created_);
      candidate(p, created_);
    }
    for (const PairAt& c : created_) {
      heap_.push_back(c);
      std::push_heap(heap_.begin(), heap_.end(), later);
    }
  }
  for (uint32_t i = 0; i != kNone; i = next_[i]) out.push_back(word_[i]);  // the first symbol is never merged away
  if (n > kScratchKeepBytes) {  // a long run's ~45 bytes per byte of scratch are not kept for the rest
    for (auto* v : {&word_, &next_, &prev_}) std::vector<uint32_t>().swap(*v);
    std::vector<PairAt>().swap(heap_);
    std::vector<PairAt>().swap(created_);
  }
}

}  // namespace loom
