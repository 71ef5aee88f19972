// `loom plan RECIPE --nodes N --gpus-per-node G --gpu KIND [--search]`: memory, FLOPs,
// communication and step time of the recipe's layout on that cluster, or (--search) every
// layout ranked; before anything is submitted (docs/plan.md). No MPI.
#include <cstdio>

#include "engine/cli/commands.hpp"
#include "engine/config/recipe_io.hpp"
#include "engine/plan/plan.hpp"

namespace loom::cli {

int cmd_plan(const PlanArgs& a) {
  try {
    Recipe r = load_recipe(a.recipe.recipe, a.recipe.sets);
    Cluster c;
    c.nodes = a.nodes;
    c.per_node = a.per_node;
    c.device = device_spec(a.gpu);
    resolve_world(r, c.world());
    if (a.search) {
      const auto all = search(r, c);
      std::printf("plan --search: %zu layouts for %d node(s) x %d %s, global batch %d (best predicted tokens/s first; "
                  "those that do not fit last)\n",
                  all.size(), c.nodes, c.per_node, c.device.name.c_str(), r.global_batch_resolved());
      std::fputs(format_search(all, size_t(a.top)).c_str(), stdout);
      if (!all.empty()) std::fputs(("\nbest:\n" + format_prediction(r, c, all.front())).c_str(), stdout);
      return 0;
    }
    const Prediction p = predict(r, c);
    std::fputs(format_prediction(r, c, p).c_str(), stdout);
    return p.fits ? 0 : 3;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "loom plan: error: %s\n", e.what());
    return 2;
  }
}

}  // namespace loom::cli
