// `loom plan RECIPE --nodes N --gpus-per-node G --gpu KIND [--search]`: memory, FLOPs,
// communication and step time of the recipe's layout on that cluster, or (--search) every
// layout ranked; before anything is submitted (docs/plan.md). No MPI.
#include <cstdio>
#include <stdexcept>
#include <string>
#include <vector>

#include "engine/cli/commands.hpp"
#include "engine/config/recipe_io.hpp"
#include "engine/plan/plan.hpp"

namespace loom::cli {

int cmd_plan(const PlanArgs& a) {
  try {
    Recipe r;
    if (a.search) {
      // The search picks the micro-batch too: the recipe's own must not be refused for not
      // dividing an explicit train.global_batch (the recipe rules' check). It is read with
      // micro_batch 1, and as written where train.global_batch is auto (micro_batch x dp).
      std::vector<std::string> sets = a.recipe.sets;
      sets.push_back("train.micro_batch=1");
      r = load_recipe(a.recipe.recipe, sets);
      if (r.train.global_batch <= 0) r = load_recipe(a.recipe.recipe, a.recipe.sets);
    } else {
      r = load_recipe(a.recipe.recipe, a.recipe.sets);
    }
    Cluster c;
    c.nodes = a.nodes;
    c.per_node = a.per_node;
    c.device = device_spec(a.gpu);
    if (a.search) {
      // The search chooses tp, pp, dp and the micro-batch itself: the recipe's own layout need
      // not fit this cluster (a recipe written for 8 GPUs searched on 3).
      if (c.world() < 1) throw std::runtime_error("the cluster must have at least 1 rank");
      r.world = c.world();
      const auto all = search(r, c);
      const int global = r.train.global_batch > 0 ? r.train.global_batch : r.train.micro_batch * c.world();
      std::printf("plan --search: %zu layouts for %d node(s) x %d %s, global batch %d (best predicted tokens/s first; "
                  "those that do not fit last)\n",
                  all.size(), c.nodes, c.per_node, c.device.name.c_str(), global);
      if (all.empty()) {  // nothing to rank: an error (exit 2), not an empty table
        std::fprintf(stderr, "loom plan: error: no layout: train.global_batch=%d is not a multiple of any micro_batch "
                     "x dp this cluster allows (tp dividing model.n_head and at most --gpus-per-node, pp dividing "
                     "model.n_layer)\n", global);
        return 2;
      }
      std::fputs(format_search(all, size_t(a.top)).c_str(), stdout);
      std::fputs(("\nbest:\n" + format_prediction(r, c, all.front())).c_str(), stdout);
      // As without --search: 3 when even the best layout does not fit (they are ranked fitting first).
      return all.front().fits ? 0 : 3;
    }
    resolve_world(r, c.world());
    const Prediction p = predict(r, c);
    std::fputs(format_prediction(r, c, p).c_str(), stdout);
    return p.fits ? 0 : 3;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "loom plan: error: %s\n", e.what());
    return 2;
  }
}

}  // namespace loom::cli
