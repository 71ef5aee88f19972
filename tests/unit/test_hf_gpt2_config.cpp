// A Hugging Face GPT-2 config.json as Loom's model section, and the errors for configs Loom
// cannot import (named file, named key).
#include <catch2/catch.hpp>

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "engine/pretrained/hf_gpt2_config.hpp"

namespace fs = std::filesystem;

namespace {

struct ConfigDir {
  fs::path dir = fs::temp_directory_path() / ("loom_hfcfg_" + std::to_string(::getpid()));
  ConfigDir() { fs::create_directories(dir); }
  ~ConfigDir() { fs::remove_all(dir); }
  void write(const std::string& json) const { std::ofstream(dir / "config.json") << json; }
  std::string error() const {
    try {
      loom::read_hf_gpt2_config(dir.string());
    } catch (const std::exception& e) {
      return e.what();
    }
    return "";
  }
};

// GPT-2 124M's config.json, as transformers writes it (abridged to the keys that matter).
const char* kGpt2 = R"({"activation_function": "gelu_new", "architectures": ["GPT2LMHeadModel"],
  "layer_norm_epsilon": 1e-05, "model_type": "gpt2", "n_ctx": 1024, "n_embd": 768, "n_head": 12,
  "n_layer": 12, "n_positions": 1024, "vocab_size": 50257})";

}  // namespace

TEST_CASE("GPT-2 124M config.json maps onto the model section", "[pretrained]") {
  ConfigDir d;
  d.write(kGpt2);
  const loom::HfGpt2Config c = loom::read_hf_gpt2_config(d.dir.string());
  CHECK(c.model.n_layer == 12);
  CHECK(c.model.n_head == 12);
  CHECK(c.model.d_model == 768);
  CHECK(c.model.seq_len == 1024);
  CHECK(c.model.vocab_size == 50257);
  CHECK(c.activation == "gelu_new");
}

TEST_CASE("config.json Loom cannot import is refused naming the key", "[pretrained]") {
  ConfigDir d;
  CHECK_THAT(d.error(), Catch::Contains("config.json: cannot open"));
  d.write("{");
  CHECK_THAT(d.error(), Catch::Contains("not valid JSON"));
  d.write(R"({"n_layer": 2, "n_head": 2, "n_embd": 8, "n_positions": 16})");
  CHECK_THAT(d.error(), Catch::Contains("vocab_size: missing"));
  d.write(R"({"n_layer": "2", "n_head": 2, "n_embd": 8, "n_positions": 16, "vocab_size": 10})");
  CHECK_THAT(d.error(), Catch::Contains("n_layer: expected a positive integer"));
  d.write(R"({"n_layer": 2, "n_head": 3, "n_embd": 8, "n_positions": 16, "vocab_size": 10})");
  CHECK_THAT(d.error(), Catch::Contains("n_embd: 8 is not divisible by n_head = 3"));
  d.write(R"({"n_layer": 2, "n_head": 2, "n_embd": 8, "n_positions": 16, "vocab_size": 10, "activation_function": "relu"})");
  CHECK_THAT(d.error(), Catch::Contains("activation_function: 'relu'"));
  d.write(R"({"n_layer": 2, "n_head": 2, "n_embd": 8, "n_positions": 16, "vocab_size": 10, "layer_norm_epsilon": 1e-6})");
  CHECK_THAT(d.error(), Catch::Contains("layer_norm_epsilon: is 1e-06"));
}
