#include "engine/data/dataset_tokenizer.hpp"

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <stdexcept>

#include "engine/data/token_dataset.hpp"

namespace loom {

TokenizerSpec dataset_tokenizer(const std::string& train) {
  std::string dir = train;
  try {
    if (const auto parts = parse_blend(train, "data.train"); !parts.empty()) dir = parts.front().second;
    std::ifstream in(std::filesystem::path(dir) / "manifest.json");
    if (!in) return {};
    const nlohmann::json data = nlohmann::json::parse(in);
    const std::string kind = data.value("tokenizer", "");
    if (kind == "byte") return {"byte", "", ""};
    if (kind == "gpt2" && data.contains("tokenizer_files"))
      return {"gpt2", data["tokenizer_files"].value("vocab", ""), data["tokenizer_files"].value("merges", "")};
  } catch (const std::exception&) {
  }
  return {};
}

std::unique_ptr<Tokenizer> make_tokenizer(const TokenizerSpec& s) {
  if (s.kind == "byte") return make_byte_tokenizer();
  if (s.kind == "gpt2") {
    if (s.vocab.empty() || s.merges.empty())
      throw std::runtime_error("the GPT-2 tokenizer needs --vocab vocab.json and --merges merges.txt "
                               "(scripts/fetch_gpt2_tokenizer.sh installs them)");
    return make_gpt2_tokenizer(s.vocab, s.merges);
  }
  throw std::runtime_error("unknown tokenizer '" + s.kind + "' (byte or gpt2)");
}

}  // namespace loom
