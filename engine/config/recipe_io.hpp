#pragma once
// Loading, overriding, validating and printing recipes. Every error is a ConfigError whose
// message names the file (or the --set override), the key, the line and what was expected.
#include <stdexcept>
#include <string>
#include <vector>

#include "engine/config/recipe.hpp"

namespace loom {

struct ConfigError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// Reads `path`, applies each "section.key=value" override in order, checks every key's type and
// range. Throws ConfigError. Cross-field rules need the world size: see resolve_world().
Recipe load_recipe(const std::string& path, const std::vector<std::string>& overrides = {});

// Applies one "section.key=value" as --set does (type and range checked; no cross-key rules).
// Throws ConfigError.
void apply_override(Recipe& r, const std::string& section_key_value);

// Resolves parallel.dp=auto and train.global_batch=auto for `world` ranks and checks every
// cross-field rule (d_model % n_head, tp | n_head, pp | n_layer, world == tp*pp*dp, ...).
void resolve_world(Recipe& r, int world);

// The fully resolved recipe as YAML, every key present, in the documented order.
std::string recipe_to_yaml(const Recipe& r);

// One line per key: "section.key  type  default  meaning" (for docs and `loom config --keys`).
std::string recipe_key_table();

}  // namespace loom
