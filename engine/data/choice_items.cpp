#include "engine/data/choice_items.hpp"

#include "engine/util/crc32c.hpp"

#include <cstring>
#include <fstream>
#include <iterator>
#include <nlohmann/json.hpp>
#include <sstream>
#include <stdexcept>

namespace loom {
namespace {

std::string read_whole(const std::string& path, const std::string& key) {
  std::ifstream f(path, std::ios::binary);
  if (!f) throw std::runtime_error(key + " " + path + ": cannot be read: " + std::strerror(errno));
  return std::string(std::istreambuf_iterator<char>(f), {});
}

// The checks both forms share; `where` names the example ("example 17", "line 3").
void check_item(const ChoiceItem& it, int vocab_size, const std::string& path, const std::string& key,
                const std::string& where) {
  auto bad = [&](const std::string& what) { throw std::runtime_error(key + " " + path + ": " + where + ": " + what); };
  if (it.endings.size() < 2) bad(std::to_string(it.endings.size()) + " ending(s); a choice needs at least 2");
  if (it.label < 0 || size_t(it.label) >= it.endings.size())
    bad("label " + std::to_string(it.label) + " names no ending (it has " + std::to_string(it.endings.size()) + ")");
  if (it.context.empty()) bad("the context is empty: the first ending token would have nothing to follow");
  auto check_tokens = [&](const std::vector<int32_t>& t, const std::string& part) {
    if (t.empty()) bad(part + " is empty");
    for (int32_t id : t)
      if (id < 0 || id >= vocab_size)
        bad(part + " holds token " + std::to_string(id) + ", outside the model's vocabulary of " +
            std::to_string(vocab_size));
  };
  check_tokens(it.context, "the context");
  for (size_t e = 0; e < it.endings.size(); ++e) check_tokens(it.endings[e], "ending " + std::to_string(e));
}

std::vector<ChoiceItem> read_llmc(const std::string& path, const std::string& key, const std::string& blob,
                                  int vocab_size) {
  auto bad = [&](const std::string& what) { throw std::runtime_error(key + " " + path + ": " + what); };
  if (blob.size() < 256 * 4) bad("shorter than llm.c's 1024-byte eval header");
  int32_t h[4];
  std::memcpy(h, blob.data(), sizeof h);
  if (h[1] != 1) bad("llm.c eval file version " + std::to_string(h[1]) + ", expected 1");
  if (h[2] <= 0) bad("the header declares " + std::to_string(h[2]) + " examples");
  const size_t words = (blob.size() - 1024) / 2;
  if ((blob.size() - 1024) % 2 != 0) bad("the examples' stream is not whole uint16 words (truncated?)");
  std::vector<uint16_t> s(words);
  std::memcpy(s.data(), blob.data() + 1024, words * 2);
  std::vector<ChoiceItem> items;
  size_t p = 0;
  for (int32_t n = 0; n < h[2]; ++n) {
    const std::string where = "example " + std::to_string(n) + " (at byte " + std::to_string(1024 + 2 * p) + ")";
    auto need = [&](size_t k) {
      if (p + k > words) bad(where + ": the file ends inside it (truncated? the header declares " +
                             std::to_string(h[2]) + " examples)");
    };
    need(5);
    if (s[p] != 65535) bad(where + ": no <START_EXAMPLE> delimiter 65535 (found " + std::to_string(s[p]) + ")");
    const size_t bytes = s[p + 1], start = p;
    if (bytes % 2 != 0 || bytes < 12) bad(where + ": <EXAMPLE_BYTES> " + std::to_string(bytes) + " is not a length");
    need(bytes / 2);
    ChoiceItem it;
    it.index = s[p + 2];
    it.label = s[p + 3];
    const int endings = s[p + 4];
    p += 5;
    auto take = [&](std::vector<int32_t>& out) {
      if (p + 1 > start + bytes / 2) bad(where + ": its lengths run past its <EXAMPLE_BYTES>");
      const size_t len = s[p++];
      if (p + len > start + bytes / 2) bad(where + ": its lengths run past its <EXAMPLE_BYTES>");
      out.assign(s.begin() + std::ptrdiff_t(p), s.begin() + std::ptrdiff_t(p + len));
      p += len;
    };
    take(it.context);
    it.endings.resize(size_t(endings));
    for (auto& e : it.endings) take(e);
    if (p != start + bytes / 2) bad(where + ": " + std::to_string(2 * (start + bytes / 2 - p)) +
                                    " bytes past its endings inside its <EXAMPLE_BYTES>");
    check_item(it, vocab_size, path, key, where);
    items.push_back(std::move(it));
  }
  if (p != words) bad(std::to_string(2 * (words - p)) + " bytes after the " + std::to_string(h[2]) +
                      " examples the header declares");
  return items;
}

std::vector<ChoiceItem> read_jsonl(const std::string& path, const std::string& key, const std::string& text,
                                   const Tokenizer* tok, int vocab_size) {
  std::vector<ChoiceItem> items;
  std::istringstream in(text);
  std::string line;
  int64_t number = 0;
  std::vector<uint32_t> ids;
  auto tokens = [&](const std::string& s) {
    ids.clear();
    tok->encode(s, ids);
    return std::vector<int32_t>(ids.begin(), ids.end());
  };
  for (int64_t lineno = 1; std::getline(in, line); ++lineno) {
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    const std::string where = "line " + std::to_string(lineno);
    auto bad = [&](const std::string& what) { throw std::runtime_error(key + " " + path + ": " + where + ": " + what); };
    if (!tok) bad("JSON lines need the model's tokenizer: give --tokenizer byte, or --vocab and --merges for GPT-2 BPE");
    nlohmann::json j;
    try {
      j = nlohmann::json::parse(line);
    } catch (const std::exception& e) {
      bad(std::string("not JSON: ") + e.what());
    }
    if (!j.is_object() || !j.contains("ctx") || !j["ctx"].is_string() || !j.contains("endings") ||
        !j["endings"].is_array() || !j.contains("label"))
      bad("expected HellaSwag's {\"ctx\": text, \"endings\": [text, ...], \"label\": number}");
    ChoiceItem it;
    it.index = number++;
    // HellaSwag's own files give the label as a number; some copies write it as a string.
    const auto& label = j["label"];
    if (label.is_number_integer())
      it.label = label.get<int>();
    else if (label.is_string() && !label.get<std::string>().empty() &&
             label.get<std::string>().find_first_not_of("0123456789") == std::string::npos)
      it.label = std::stoi(label.get<std::string>());
    else
      bad("\"label\" is not a whole number");
    it.context = tokens(j["ctx"].get<std::string>());
    for (const auto& e : j["endings"]) {
      if (!e.is_string()) bad("an ending is not text");
      std::string ending(1, ' ');  // as llm.c and nanoGPT render them (appended: GCC 12's -Wrestrict misfires on " " + s)
      ending += e.get_ref<const std::string&>();
      it.endings.push_back(tokens(ending));
    }
    check_item(it, vocab_size, path, key, where);
    items.push_back(std::move(it));
  }
  if (items.empty()) throw std::runtime_error(key + " " + path + ": holds no example");
  return items;
}

}  // namespace

bool is_llmc_eval_file(const std::string& path, const std::string& key) {
  std::ifstream f(path, std::ios::binary);
  if (!f) throw std::runtime_error(key + " " + path + ": cannot be read: " + std::strerror(errno));
  int32_t magic = 0;
  return f.read(reinterpret_cast<char*>(&magic), sizeof magic) && magic == kLlmcEvalMagic;
}

std::vector<ChoiceItem> read_choice_items(const std::string& path, const Tokenizer* tok, int vocab_size,
                                          const std::string& key) {
  const std::string blob = read_whole(path, key);
  int32_t magic = 0;
  if (blob.size() >= 4) std::memcpy(&magic, blob.data(), 4);
  if (magic == kLlmcEvalMagic) return read_llmc(path, key, blob, vocab_size);
  if (blob.find_first_not_of(" \t\r\n") != std::string::npos && blob[blob.find_first_not_of(" \t\r\n")] == '{')
    return read_jsonl(path, key, blob, tok, vocab_size);
  throw std::runtime_error(key + " " + path + ": neither an llm.c eval file (magic " + std::to_string(kLlmcEvalMagic) +
                           ") nor HellaSwag JSON lines");
}

DataFingerprint choice_items_fingerprint(const std::vector<ChoiceItem>& items) {
  DataFingerprint print;
  std::vector<int32_t> words;
  for (const ChoiceItem& it : items) {
    words.assign({it.label, int32_t(it.endings.size()), int32_t(it.context.size())});
    words.insert(words.end(), it.context.begin(), it.context.end());
    for (const auto& e : it.endings) {
      words.push_back(int32_t(e.size()));
      words.insert(words.end(), e.begin(), e.end());
      print.tokens += e.size();
    }
    print.tokens += it.context.size();
    print.crc32c = crc32c(words.data(), words.size() * sizeof(int32_t), print.crc32c);
  }
  return print;
}

}  // namespace loom
