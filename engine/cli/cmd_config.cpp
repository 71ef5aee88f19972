// `loom config RECIPE`: the fully resolved recipe, defaults filled in, as YAML.
#include <cstdio>

#include "engine/cli/commands.hpp"
#include "engine/config/recipe_io.hpp"

namespace loom::cli {

int cmd_config(const RecipeArgs& a, int world, bool keys) {
  if (keys) {
    std::fputs(recipe_key_table().c_str(), stdout);
    return 0;
  }
  if (world < 1) {  // --world 0 divided by zero (SIGFPE); a negative one printed negative products
    std::fprintf(stderr, "loom: error: --world %d: the number of ranks must be at least 1\n", world);
    return 2;
  }
  try {
    Recipe r = load_recipe(a.recipe, a.sets);
    resolve_world(r, world);
    std::fputs(recipe_to_yaml(r).c_str(), stdout);
    return 0;
  } catch (const ConfigError& e) {
    std::fprintf(stderr, "loom: error: %s\n", e.what());
    return 2;
  }
}

}  // namespace loom::cli
