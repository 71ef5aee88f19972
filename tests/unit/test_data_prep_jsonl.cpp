// `loom prep --json-key`: JSON lines (Megatron's preprocess_data.py input) read one document per
// line, and the lines and inputs it refuses.
#include <catch2/catch.hpp>

#include <fstream>
#include <nlohmann/json.hpp>

#include "data_test_files.hpp"
#include "engine/data/prep.hpp"
#include "engine/data/token_dataset.hpp"

using namespace loom;
using namespace loom::test;

TEST_CASE("loom prep reads JSON lines with --json-key, each line's string one document") {
  auto dir = fresh_dir("prep_jsonl");
  // Escapes (newline, quote, unicode), a blank line, an empty document and other keys.
  std::ofstream(dir / "in.jsonl") << R"({"id": 1, "text": "first doc\nline two"})" << "\n\n"
                                  << R"({"text": "say \"hi\" caf\u00e9", "url": "x"})" << "\n"
                                  << R"({"text": ""})" << "\n"
                                  << R"({"text": "last"})";
  PrepOptions o;
  o.out = (dir / "out").string();
  o.inputs = {(dir / "in.jsonl").string()};
  o.json_key = "text";
  const PrepSummary s = run_prep(o);
  CHECK(s.documents == 3);
  std::vector<uint32_t> want;
  for (const std::string d : {"first doc\nline two", "say \"hi\" caf\xc3\xa9", "last"}) {
    want.push_back(256);
    for (unsigned char c : d) want.push_back(c);
  }
  CHECK(all_tokens(open_dataset(o.out, "auto", "data.train", "train")) == want);
  CHECK(nlohmann::json::parse(std::ifstream(fs::path(o.out) / "manifest.json"))["json_key"] == "text");

  auto error = [&](const std::string& text, const std::string& key, const std::string& sep = "") {
    std::ofstream(dir / "bad.jsonl") << text;
    PrepOptions b;
    b.out = (dir / "bad_out").string();
    b.inputs = {(dir / "bad.jsonl").string()};
    b.json_key = key;
    b.doc_separator = sep;
    return error_of([&] { run_prep(b); });
  };
  CHECK_THAT(error("{\"text\": \"a\"}\n{oops\n", "text"), Catch::Contains("bad.jsonl:2: not a JSON object"));
  CHECK_THAT(error("{\"body\": \"a\"}\n", "text"), Catch::Contains("bad.jsonl:1: no string at \"text\" (--json-key)"));
  CHECK_THAT(error("{\"text\": 5}\n", "text"), Catch::Contains("bad.jsonl:1: no string at \"text\""));
  CHECK_THAT(error("[1, 2]\n", "text"), Catch::Contains("the line is not a JSON object"));
  CHECK_THAT(error("{\"text\": \"a\"}\n", "", ""), Catch::Contains("looks like JSON lines: give --json-key KEY"));
  CHECK_THAT(error("{\"text\": \"a\"}\n", "text", "%"), Catch::Contains("--json-key and --doc-separator"));
  CHECK_FALSE(fs::exists(dir / "bad_out"));  // a failed prep leaves nothing under --out
}
