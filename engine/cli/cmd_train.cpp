// `loom train RECIPE`: every rank loads and checks the recipe and builds its trainer; the ranks
// agree on the first error before anything runs (printed once, every rank exits 2). An error
// after that point aborts the whole job (exit 1), so no rank is left waiting for another.
#include <cstdio>
#include <memory>

#include "engine/cli/commands.hpp"
#include "engine/config/recipe_io.hpp"
#include "engine/train/trainer.hpp"
#include "parallel/mpi_world.hpp"

namespace loom::cli {

int cmd_train(const RecipeArgs& a, int* argc, char*** argv) {
  parallel::MpiWorld world(argc, argv);
  std::string error;
  std::unique_ptr<Trainer> trainer;
  try {
    Recipe r = load_recipe(a.recipe, a.sets);
    resolve_world(r, world.size());
    trainer = std::make_unique<Trainer>(r, world.rank(), world.size());
  } catch (const std::exception& e) {
    error = e.what();
  }
  error = world.agree_on_error(error);
  if (!error.empty()) {
    if (world.rank() == 0) std::fprintf(stderr, "loom: error: %s\n", error.c_str());
    return 2;
  }
  try {
    TrainSummary s = trainer->run();
    if (world.rank() == 0)
      std::printf("loom: trained %lld steps, final loss %.4f, %.0f tokens/s\n", (long long)s.steps, s.final_loss,
                  s.tokens_per_s);
  } catch (const std::exception& e) {
    world.abort(e.what(), 1);
  }
  return 0;
}

}  // namespace loom::cli
