#pragma once
// The cross-key rules of a recipe that need no world size (load_recipe runs them; the rest are
// in resolve_world). Throws ConfigError naming the keys, their values and where they were set.
#include "engine/config/recipe.hpp"

namespace loom {

void validate_shapes(const Recipe& r);

}  // namespace loom
