#include "engine/cli/model_tokenizer.hpp"

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <yaml-cpp/yaml.h>

namespace loom::cli {
namespace fs = std::filesystem;

namespace {

// The tokenizer recorded by the `loom prep` directory (or blend of them) a Loom checkpoint's run
// trained on.
ModelTokenizer from_checkpoint_run(const std::string& ckpt) {
  try {
    const nlohmann::json man = nlohmann::json::parse(std::ifstream(fs::path(ckpt) / "manifest.json"));
    const YAML::Node recipe = YAML::Load(man.at("recipe").get<std::string>());
    return dataset_tokenizer(recipe["data"]["train"].as<std::string>(""));
  } catch (const std::exception&) {
  }
  return {};
}

}  // namespace

ModelTokenizer model_tokenizer(const PretrainedSource& src) {
  ModelTokenizer t;
  if (src.format() == "Loom checkpoint") t = from_checkpoint_run(src.path());
  if (t.kind.empty() && src.format() == "Hugging Face GPT-2") {
    const fs::path v = fs::path(src.path()) / "vocab.json", m = fs::path(src.path()) / "merges.txt";
    if (fs::exists(v) && fs::exists(m)) t = {"gpt2", v.string(), m.string()};
  }
  if (t.kind.empty() && src.model().vocab_size == 257) t.kind = "byte";
  return t;
}

std::unique_ptr<Tokenizer> make_model_tokenizer(const PretrainedSource& src, const std::string& kind,
                                                const std::string& vocab, const std::string& merges,
                                                const std::string& or_else) {
  ModelTokenizer t = model_tokenizer(src);
  if (!vocab.empty() || !merges.empty()) t = {"gpt2", vocab, merges};
  if (!kind.empty() && kind != t.kind) t = {kind, vocab, merges};
  if (t.kind == "byte" || t.kind == "gpt2") return make_tokenizer(t);
  throw std::runtime_error(src.path() + ": cannot tell which tokenizer the model uses: give --tokenizer byte, or "
                           "--vocab and --merges for GPT-2 BPE" + (or_else.empty() ? "" : " (or use " + or_else + ")"));
}

}  // namespace loom::cli
