#include "engine/checkpoint/lora_manifest.hpp"

#include <sstream>

namespace loom {

LoraSpec lora_spec(const LoraConfig& c) {
  LoraSpec s;
  s.rank = c.rank;
  s.alpha = c.alpha;
  s.qkv = s.attn_proj = s.fc = s.mlp_proj = false;
  std::stringstream in(c.targets);
  for (std::string t; std::getline(in, t, ',');) {
    if (t == "qkv") s.qkv = true;
    if (t == "attn_proj") s.attn_proj = true;
    if (t == "fc") s.fc = true;
    if (t == "mlp_proj") s.mlp_proj = true;
  }
  s.train_embeddings = c.train_embeddings;
  s.train_layernorm = c.train_layernorm;
  s.quantize = c.quantize == "int8" ? 1 : c.quantize == "nf4" ? 2 : 0;
  s.quant_block = c.quant_block;
  s.dropout = float(c.dropout);
  return s;
}

nlohmann::json lora_to_json(const LoraSpec& s) {
  nlohmann::json targets = nlohmann::json::array();
  if (s.qkv) targets.push_back("qkv");
  if (s.attn_proj) targets.push_back("attn_proj");
  if (s.fc) targets.push_back("fc");
  if (s.mlp_proj) targets.push_back("mlp_proj");
  return {{"rank", s.rank}, {"alpha", s.alpha}, {"targets", targets}, {"train_embeddings", s.train_embeddings},
          {"train_layernorm", s.train_layernorm}};
}

LoraSpec lora_from_manifest_model(const nlohmann::json& model) {
  LoraSpec s;
  if (!model.contains("lora")) return s;
  const auto& l = model["lora"];
  s.rank = l.at("rank").get<int>();
  s.alpha = l.at("alpha").get<double>();
  s.qkv = s.attn_proj = s.fc = s.mlp_proj = false;
  for (const auto& t : l.at("targets")) {
    const std::string name = t.get<std::string>();
    if (name == "qkv") s.qkv = true;
    if (name == "attn_proj") s.attn_proj = true;
    if (name == "fc") s.fc = true;
    if (name == "mlp_proj") s.mlp_proj = true;
  }
  s.train_embeddings = l.value("train_embeddings", false);
  s.train_layernorm = l.value("train_layernorm", false);
  return s;
}

}  // namespace loom
