// loom::Gpt2Bpe against a faithful Python re-implementation of OpenAI's encoder.py: a 557-token
// vocab learnt from the fortunes and the expected ids of every case, all made by
// scripts/make_bpe_golden.py into tests/data/bpe/. Plus the constructor's errors.
#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>
#include <map>
#include <random>
#include <nlohmann/json.hpp>
#include <sstream>

#include "engine/data/gpt2_bpe.hpp"

using loom::Gpt2Bpe;
using Catch::Matchers::Contains;

namespace {

const std::string kDir = std::string(LOOM_TEST_DATA_DIR) + "/bpe/";
const std::string kVocab = kDir + "vocab.json";
const std::string kMerges = kDir + "merges.txt";

struct Case {
  std::string text;  // raw bytes
  std::vector<uint32_t> ids;
};

std::string from_hex(const std::string& hex) {
  std::string out;
  for (size_t i = 0; i + 1 < hex.size(); i += 2) out += char(std::stoi(hex.substr(i, 2), nullptr, 16));
  return out;
}

// The cases of a .jsonl file: {"text": ..., "ids": [...]} or {"hex": ..., "ids": [...]} per line.
std::vector<Case> load_cases(const std::string& path) {
  std::ifstream f(path);
  REQUIRE(f);
  std::vector<Case> cases;
  for (std::string line; std::getline(f, line);) {
    const auto j = nlohmann::json::parse(line);
    cases.push_back({j.contains("hex") ? from_hex(j.at("hex").get<std::string>()) : j.at("text").get<std::string>(),
                     j.at("ids").get<std::vector<uint32_t>>()});
  }
  return cases;
}

std::string show(const std::vector<uint32_t>& ids) {
  std::string s = "[";
  for (size_t i = 0; i < ids.size(); ++i) s += (i ? ", " : "") + std::to_string(ids[i]);
  return s + "]";
}

// Encodes every case (appending to one growing buffer, so encode() must only append) and reports
// the first mismatches with their text, expected and got ids.
void check_cases(const Gpt2Bpe& bpe, const std::vector<Case>& cases) {
  std::vector<uint32_t> all;
  int bad = 0;
  for (const Case& c : cases) {
    const size_t before = all.size();
    bpe.encode(c.text, all);
    const std::vector<uint32_t> got(all.begin() + before, all.end());
    if (got != c.ids && ++bad <= 10)
      FAIL_CHECK("text " << nlohmann::json(c.text).dump(-1, ' ', true, nlohmann::json::error_handler_t::replace)
                         << "\nexpected " << show(c.ids) << "\ngot      " << show(got));
  }
  INFO(bad << " of " << cases.size() << " cases differ");
  CHECK(bad == 0);
}

std::string write_file(const std::string& name, const std::string& text) {
  auto dir = std::filesystem::temp_directory_path() / "loom_test_gpt2_bpe";
  std::filesystem::create_directories(dir);
  auto path = (dir / name).string();
  std::ofstream(path, std::ios::binary) << text;
  return path;
}

std::string error_of(const std::string& vocab, const std::string& merges) {
  try {
    Gpt2Bpe bpe(vocab, merges);
  } catch (const std::runtime_error& e) {
    return e.what();
  }
  return "";
}

std::string file_text(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::ostringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

}  // namespace

TEST_CASE("Gpt2Bpe matches encoder.py on every golden case", "[bpe]") {
  const Gpt2Bpe bpe(kVocab, kMerges);
  const auto cases = load_cases(kDir + "cases.jsonl");
  REQUIRE(cases.size() >= 300);
  check_cases(bpe, cases);
  SECTION("again, from the cache") { check_cases(bpe, cases); }
}

TEST_CASE("Gpt2Bpe encodes invalid UTF-8 as encoder.py on surrogateescape-decoded text", "[bpe]") {
  const Gpt2Bpe bpe(kVocab, kMerges);
  const auto cases = load_cases(kDir + "cases_invalid_utf8.jsonl");
  REQUIRE(cases.size() >= 20);
  check_cases(bpe, cases);
}

TEST_CASE("Gpt2Bpe vocab size and end-of-text id", "[bpe]") {
  const Gpt2Bpe bpe(kVocab, kMerges);
  CHECK(bpe.vocab_size() == 256 + 300 + 1);  // bytes, the script's 300 merges, <|endoftext|>
  CHECK(bpe.eot_id() == 556);
  // The literal text is not special: it is encoded as ordinary characters.
  std::vector<uint32_t> ids;
  bpe.encode("<|endoftext|>", ids);
  CHECK(ids.size() > 1);
  CHECK(std::find(ids.begin(), ids.end(), uint32_t(bpe.eot_id())) == ids.end());

  // The same vocab without its last entry, "<|endoftext|>" (json.dump writes `, "key": id` pairs).
  std::string vocab = file_text(kVocab);
  vocab.erase(vocab.rfind(", \"<|endoftext|>\""));
  vocab += '}';
  const std::string no_eot = write_file("no_eot.json", vocab);
  const Gpt2Bpe plain(no_eot, kMerges);
  CHECK(plain.eot_id() == -1);
  CHECK(plain.vocab_size() == 556);
}

TEST_CASE("Gpt2Bpe handles megabyte-long runs of one class", "[bpe]") {
  const Gpt2Bpe bpe(kVocab, kMerges);
  for (const std::string& text : {std::string(1 << 20, ' '), std::string(1 << 20, 'a'), std::string(1 << 20, '!'),
                                  std::string(1 << 20, '7'), std::string(1 << 20, '\xff')}) {
    std::vector<uint32_t> ids;
    bpe.encode(text, ids);
    CHECK(!ids.empty());
    CHECK(ids.size() <= text.size());
  }
}

TEST_CASE("Gpt2Bpe errors name the file and the problem", "[bpe]") {
  const std::string missing = kDir + "no_such_vocab.json";
  CHECK_THAT(error_of(missing, kMerges), Contains(missing) && Contains("cannot open"));
  const std::string missing_merges = kDir + "no_such_merges.txt";
  CHECK_THAT(error_of(kVocab, missing_merges), Contains(missing_merges) && Contains("cannot open"));

  const std::string merges = file_text(kMerges);
  const std::string bad_line = write_file("bad_line.txt", merges + "a b c\n");
  const int last_line = int(std::count(merges.begin(), merges.end(), '\n')) + 1;
  CHECK_THAT(error_of(kVocab, bad_line), Contains(bad_line + ":" + std::to_string(last_line)) && Contains("two"));
  const std::string one_symbol = write_file("one_symbol.txt", "#version: 0.2\nth\n");
  CHECK_THAT(error_of(kVocab, one_symbol), Contains(one_symbol + ":2"));
  const std::string unknown = write_file("unknown_result.txt", "#version: 0.2\nz q\n");
  CHECK_THAT(error_of(kVocab, unknown), Contains(unknown + ":2") && Contains("\"zq\"") && Contains(kVocab));

  const std::string array = write_file("array.json", "[\"a\", 1]");
  CHECK_THAT(error_of(array, kMerges), Contains(array) && Contains("object"));
  const std::string broken = write_file("broken.json", "{\"a\": 1,");
  CHECK_THAT(error_of(broken, kMerges), Contains(broken) && Contains("JSON"));
  const std::string bad_id = write_file("bad_id.json", "{\"a\": -3}");
  CHECK_THAT(error_of(bad_id, kMerges), Contains(bad_id) && Contains("\"a\""));
  const std::string twice = write_file("twice.json", "{\"a\": 1, \"b\": 1}");
  CHECK_THAT(error_of(twice, kMerges), Contains(twice) && Contains("id 1"));
  const std::string no_bytes = write_file("no_bytes.json", "{\"a\": 0}");
  CHECK_THAT(error_of(no_bytes, kMerges), Contains(no_bytes) && Contains("byte"));
}

namespace {

// encoder.py's bpe() as written there, on symbol strings (for letters, bytes_to_unicode is the
// identity): rescans the word for the lowest-rank pair and merges all its occurrences left to
// right, until none is left. Quadratic, as encoder.py is; the reference for Gpt2Bpe's heap.
std::vector<uint32_t> reference_bpe(const std::string& word, const nlohmann::json& vocab,
                                    const std::map<std::pair<std::string, std::string>, size_t>& ranks) {
  std::vector<std::string> w;
  for (char c : word) w.emplace_back(1, c);
  while (w.size() > 1) {
    size_t best = SIZE_MAX;
    std::pair<std::string, std::string> pair;
    for (size_t i = 0; i + 1 < w.size(); ++i)
      if (auto it = ranks.find({w[i], w[i + 1]}); it != ranks.end() && it->second < best) {
        best = it->second;
        pair = it->first;
      }
    if (best == SIZE_MAX) break;
    std::vector<std::string> merged;
    for (size_t i = 0; i < w.size();) {
      if (i + 1 < w.size() && w[i] == pair.first && w[i + 1] == pair.second) {
        merged.push_back(w[i] + w[i + 1]);
        i += 2;
      } else {
        merged.push_back(w[i++]);
      }
    }
    w = std::move(merged);
  }
  std::vector<uint32_t> ids;
  for (const std::string& s : w) ids.push_back(vocab.at(s).get<uint32_t>());
  return ids;
}

}  // namespace

TEST_CASE("Gpt2Bpe merges long words exactly as encoder.py's loop does", "[bpe]") {
  // Long runs of letters (a DNA sequence, a minified blob) are one piece each: the heap-based
  // bpe() must give encoder.py's ids on them, whatever the length.
  const Gpt2Bpe bpe(kVocab, kMerges);
  const auto vocab = nlohmann::json::parse(file_text(kVocab));
  std::map<std::pair<std::string, std::string>, size_t> ranks;
  std::istringstream lines(file_text(kMerges));
  std::string line;
  std::getline(lines, line);  // #version
  while (std::getline(lines, line)) {
    std::istringstream f(line);
    std::string a, b;
    if (f >> a >> b) ranks[{a, b}] = ranks.size();
  }
  REQUIRE(ranks.size() == 300);
  std::mt19937 rng(7);
  const std::string alphabets[] = {"ab", "ACGT", "etaoinshr", "abcdefghijklmnopqrstuvwxyz", "the"};
  int checked = 0;
  for (int len : {2, 3, 5, 17, 100, 1000, 20000}) {
    for (const std::string& alphabet : alphabets) {
      std::string word;
      for (int i = 0; i < len; ++i) word += alphabet[rng() % alphabet.size()];
      std::vector<uint32_t> got;
      bpe.encode(word, got);
      const std::vector<uint32_t> want = reference_bpe(word, vocab, ranks);
      INFO("a word of " << len << " letters of \"" << alphabet << "\"");
      CHECK(got == want);
      checked += got.size() < word.size();  // some merges happened
    }
  }
  CHECK(checked >= 20);
}

TEST_CASE("Gpt2Bpe merges every occurrence of a rank before the pairs that merging creates", "[bpe]") {
  // merges.txt: "ab a" (rank 0) then "a b" (rank 1). On "abab" encoder.py merges both "a b"
  // first (ab ab), and "ab a" no longer occurs. Merging the first "a b" and then at once the
  // lower-ranked "ab a" it created would give aba b instead.
  nlohmann::json vocab = nlohmann::json::object();
  const auto full = nlohmann::json::parse(file_text(kVocab));
  for (const auto& [token, id] : full.items())
    if (id.get<uint32_t>() < 256) vocab[token] = id;
  vocab["ab"] = 256;
  vocab["aba"] = 257;
  const Gpt2Bpe bpe(write_file("order_vocab.json", vocab.dump()),
                    write_file("order_merges.txt", "#version: 0.2\nab a\na b\n"));
  std::vector<uint32_t> ids;
  bpe.encode("abab", ids);
  CHECK(ids == std::vector<uint32_t>{256, 256});
  ids.clear();
  bpe.encode("aba", ids);  // a b, then ab a
  CHECK(ids == std::vector<uint32_t>{257});
  ids.clear();
  bpe.encode("ababa", ids);  // ab ab a, then ab aba
  CHECK(ids == std::vector<uint32_t>{256, 257});
}
