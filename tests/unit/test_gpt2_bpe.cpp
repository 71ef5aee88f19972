// loom::Gpt2Bpe against a faithful Python re-implementation of OpenAI's encoder.py: a 557-token
// vocab learnt from the fortunes and the expected ids of every case, all made by
// scripts/make_bpe_golden.py into tests/data/bpe/. Plus the constructor's errors.
#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>
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
