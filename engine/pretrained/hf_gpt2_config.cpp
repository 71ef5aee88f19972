#include "engine/pretrained/hf_gpt2_config.hpp"

#include <cmath>
#include <fstream>
#include <nlohmann/json.hpp>
#include <stdexcept>

namespace loom {

HfGpt2Config read_hf_gpt2_config(const std::string& dir) {
  const std::string path = dir + "/config.json";
  std::ifstream in(path);
  if (!in) throw std::runtime_error(path + ": cannot open (a Hugging Face GPT-2 directory has config.json)");
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(in);
  } catch (const std::exception& e) {
    throw std::runtime_error(path + ": not valid JSON (" + e.what() + ")");
  }
  auto bad = [&](const std::string& key, const std::string& what) {
    return std::runtime_error(path + ": " + key + ": " + what);
  };
  auto positive_int = [&](const char* key) {
    if (!j.contains(key)) throw bad(key, "missing (a GPT-2 config has it)");
    if (!j[key].is_number_integer() || j[key].get<long long>() <= 0)
      throw bad(key, "expected a positive integer, got " + j[key].dump());
    return j[key].get<int>();
  };
  HfGpt2Config c;
  c.model.n_layer = positive_int("n_layer");
  c.model.n_head = positive_int("n_head");
  c.model.d_model = positive_int("n_embd");
  c.model.seq_len = positive_int("n_positions");
  c.model.vocab_size = positive_int("vocab_size");
  if (c.model.d_model % c.model.n_head != 0)
    throw bad("n_embd", std::to_string(c.model.d_model) + " is not divisible by n_head = " +
                            std::to_string(c.model.n_head));
  if (j.contains("layer_norm_epsilon")) {
    if (!j["layer_norm_epsilon"].is_number()) throw bad("layer_norm_epsilon", "expected a number");
    c.layer_norm_epsilon = j["layer_norm_epsilon"].get<double>();
    if (std::fabs(c.layer_norm_epsilon - 1e-5) > 1e-12)
      throw bad("layer_norm_epsilon", "is " + j["layer_norm_epsilon"].dump() + "; Loom's LayerNorm uses GPT-2's 1e-5");
  }
  if (j.contains("activation_function")) {
    if (!j["activation_function"].is_string()) throw bad("activation_function", "expected a string");
    c.activation = j["activation_function"].get<std::string>();
    if (c.activation != "gelu_new" && c.activation != "gelu_pytorch_tanh")
      throw bad("activation_function", "'" + c.activation + "'; Loom's GPT computes the tanh GELU (gelu_new)");
  }
  return c;
}

}  // namespace loom
