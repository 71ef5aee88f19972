#pragma once
// A LoRA run's checkpoint records its adapters' spec and the base model it adapts in the
// manifest's "model" section ({"lora": {...}, "base": model.init_from}): a load checks the spec
// against the model's (the datasets differ otherwise), and `loom export` / `loom sample` find the
// frozen base there (its weights are not in the checkpoint).
#include <nlohmann/json.hpp>
#include <string>

#include "engine/config/recipe.hpp"
#include "engine/model/gpt_shape.hpp"

namespace loom {

// From the recipe's lora section (validated: targets among qkv, attn_proj, fc, mlp_proj).
LoraSpec lora_spec(const LoraConfig& c);
nlohmann::json lora_to_json(const LoraSpec& s);
// The manifest's model section's "lora" (absent: no adapters).
LoraSpec lora_from_manifest_model(const nlohmann::json& model);

}  // namespace loom
