// Multiple-choice items (engine/data/choice_items.hpp): llm.c's eval-file layout read back as
// written, HellaSwag's JSON lines tokenized as llm.c renders them, and each malformed file
// refused with the file and the example named.
#include <catch2/catch.hpp>

#include <fstream>

#include "engine/data/choice_items.hpp"
#include "tests/unit/data_test_files.hpp"

using namespace loom;
using namespace loom::test;

namespace {

struct Example {
  uint16_t label;
  std::vector<uint16_t> ctx;
  std::vector<std::vector<uint16_t>> ends;
};

// The layout of llm.c's write_evalfile (dev/data/data_common.py): header words then, per
// example, 65535, its bytes, its index, label, endings, the context and each ending with lengths.
std::vector<uint16_t> stream_of(const std::vector<Example>& ex) {
  std::vector<uint16_t> s;
  for (size_t i = 0; i < ex.size(); ++i) {
    const size_t start = s.size();
    s.insert(s.end(), {65535, 0, uint16_t(i), ex[i].label, uint16_t(ex[i].ends.size()), uint16_t(ex[i].ctx.size())});
    s.insert(s.end(), ex[i].ctx.begin(), ex[i].ctx.end());
    for (const auto& e : ex[i].ends) {
      s.push_back(uint16_t(e.size()));
      s.insert(s.end(), e.begin(), e.end());
    }
    s[start + 1] = uint16_t(2 * (s.size() - start));
  }
  return s;
}

void write_eval(const fs::path& p, int32_t examples, const std::vector<uint16_t>& stream, int32_t version = 1) {
  std::ofstream f(p, std::ios::binary);
  std::vector<int32_t> h(256, 0);
  h[0] = kLlmcEvalMagic;
  h[1] = version;
  h[2] = examples;
  f.write(reinterpret_cast<const char*>(h.data()), 1024);
  f.write(reinterpret_cast<const char*>(stream.data()), std::streamsize(stream.size() * 2));
}

const std::vector<Example> kTwo = {{2, {5, 6, 7}, {{1}, {2, 3}, {4}, {9, 9, 9}}}, {0, {8}, {{10, 11}, {12}}}};

}  // namespace

TEST_CASE("the items' fingerprint changes with any label, length or token") {
  std::vector<ChoiceItem> items = {{0, 1, {5, 6}, {{1}, {2, 3}}}, {1, 0, {7}, {{4}, {8}}}};
  const DataFingerprint a = choice_items_fingerprint(items);
  CHECK(a.tokens == 8);
  CHECK(choice_items_fingerprint(items).crc32c == a.crc32c);
  auto changed = [&](auto edit) {
    auto copy = items;
    edit(copy);
    return choice_items_fingerprint(copy).crc32c != a.crc32c;
  };
  CHECK(changed([](auto& v) { v[1].label = 1; }));
  CHECK(changed([](auto& v) { v[0].endings[1] = {2}; v[0].endings[0] = {1, 3}; }));  // same tokens, other split
  CHECK(changed([](auto& v) { v[1].context[0] = 9; }));
  CHECK(changed([](auto& v) { v.pop_back(); }));
}

TEST_CASE("an llm.c eval file reads back as written") {
  const auto dir = fresh_dir("choices_llmc");
  write_eval(dir / "e.bin", 2, stream_of(kTwo));
  CHECK(is_llmc_eval_file((dir / "e.bin").string()));
  const auto items = read_choice_items((dir / "e.bin").string(), nullptr, 50257);
  REQUIRE(items.size() == 2);
  CHECK(items[0].index == 0);
  CHECK(items[0].label == 2);
  CHECK(items[0].context == std::vector<int32_t>{5, 6, 7});
  REQUIRE(items[0].endings.size() == 4);
  CHECK(items[0].endings[3] == std::vector<int32_t>{9, 9, 9});
  CHECK(items[1].index == 1);
  CHECK(items[1].endings.size() == 2);
  CHECK(items[1].endings[0] == std::vector<int32_t>{10, 11});
}

TEST_CASE("a malformed llm.c eval file is refused naming the file and the example") {
  const auto dir = fresh_dir("choices_llmc_bad");
  const std::string p = (dir / "e.bin").string();
  auto error = [&](int32_t examples, std::vector<uint16_t> s, int vocab = 50257, int32_t version = 1) {
    write_eval(p, examples, s, version);
    return error_of([&] { read_choice_items(p, nullptr, vocab); });
  };
  const auto good = stream_of(kTwo);
  CHECK_THAT(error(3, good), Catch::Contains("e.bin: example 2") && Catch::Contains("the file ends inside it"));
  CHECK_THAT(error(1, good), Catch::Contains("bytes after the 1 examples the header declares"));
  auto s = good;
  s[0] = 7;
  CHECK_THAT(error(2, s), Catch::Contains("example 0 (at byte 1024): no <START_EXAMPLE> delimiter 65535 (found 7)"));
  s = good;
  s[3] = 4;  // label 4 of 4 endings
  CHECK_THAT(error(2, s), Catch::Contains("example 0") && Catch::Contains("label 4 names no ending (it has 4)"));
  CHECK_THAT(error(2, good, 10),
             Catch::Contains("example 1") && Catch::Contains("ending 0 holds token 10, outside the model's vocabulary of 10"));
  CHECK_THAT(error(2, good, 50257, 2), Catch::Contains("llm.c eval file version 2, expected 1"));
  s = good;
  s[5] = 9;  // a context length past the example's bytes
  CHECK_THAT(error(2, s), Catch::Contains("example 0") && Catch::Contains("run past its <EXAMPLE_BYTES>"));
}

TEST_CASE("HellaSwag's JSON lines are tokenized as llm.c renders them") {
  const auto dir = fresh_dir("choices_jsonl");
  const std::string p = (dir / "h.jsonl").string();
  std::ofstream(p) << R"({"ind": 24, "ctx": "A man", "endings": ["runs.", "sits"], "label": 1})" << "\n\n"
                   << R"({"ctx": "He", "endings": ["a", "b", "c"], "label": "0"})" << "\n";
  const auto tok = make_byte_tokenizer();
  const auto items = read_choice_items(p, tok.get(), 257);
  REQUIRE(items.size() == 2);
  CHECK(items[0].index == 0);
  CHECK(items[0].label == 1);
  CHECK(items[0].context == std::vector<int32_t>{'A', ' ', 'm', 'a', 'n'});
  CHECK(items[0].endings[0] == std::vector<int32_t>{' ', 'r', 'u', 'n', 's', '.'});  // a space before each ending
  CHECK(items[0].endings[1] == std::vector<int32_t>{' ', 's', 'i', 't', 's'});
  CHECK(items[1].index == 1);
  CHECK(items[1].label == 0);  // a label written as text
  CHECK_FALSE(is_llmc_eval_file(p));
}

TEST_CASE("malformed JSON lines are refused naming the line") {
  const auto dir = fresh_dir("choices_jsonl_bad");
  const std::string p = (dir / "h.jsonl").string();
  const auto tok = make_byte_tokenizer();
  auto error = [&](const std::string& text, const Tokenizer* t) {
    std::ofstream(p) << text;
    return error_of([&] { read_choice_items(p, t, 257); });
  };
  const std::string ok = R"({"ctx": "A", "endings": ["b", "c"], "label": 0})";
  CHECK_THAT(error(ok + "\n{nope\n", tok.get()), Catch::Contains("h.jsonl: line 2: not JSON"));
  CHECK_THAT(error(ok + "\n" + R"({"ctx": "A", "label": 0})", tok.get()), Catch::Contains("line 2: expected HellaSwag's"));
  CHECK_THAT(error(R"({"ctx": "A", "endings": ["b"], "label": 0})", tok.get()),
             Catch::Contains("line 1: 1 ending(s); a choice needs at least 2"));
  CHECK_THAT(error(R"({"ctx": "", "endings": ["b", "c"], "label": 0})", tok.get()),
             Catch::Contains("line 1: the context is empty"));
  CHECK_THAT(error(R"({"ctx": "A", "endings": ["b", "c"], "label": -1})", tok.get()),
             Catch::Contains("label -1 names no ending"));
  CHECK_THAT(error(R"({"ctx": "A", "endings": ["b", "c"], "label": "x"})", tok.get()),
             Catch::Contains("\"label\" is not a whole number"));
  CHECK_THAT(error(ok, nullptr), Catch::Contains("JSON lines need the model's tokenizer"));
  CHECK_THAT(error("\n\n", tok.get()), Catch::Contains("neither an llm.c eval file"));
  CHECK_THAT(error("hello", tok.get()), Catch::Contains("neither an llm.c eval file"));
  CHECK_THAT(error_of([&] { read_choice_items((dir / "absent").string(), tok.get(), 257); }),
             Catch::Contains("absent: cannot be read"));
  // Before the format decides whether a tokenizer is needed: a missing file is said as such.
  CHECK_THAT(error_of([&] { is_llmc_eval_file((dir / "absent").string(), "log.choices"); }),
             Catch::StartsWith("log.choices ") && Catch::Contains("absent: cannot be read"));
}
