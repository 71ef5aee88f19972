// `loom train RECIPE`: every rank loads and checks the recipe and builds its trainer; the ranks
// agree on the first error before anything runs (printed once, every rank exits 2). An error
// after that point aborts the whole job (exit 1), so no rank is left waiting for another.
#include <cstdio>
#include <memory>

#include "engine/cli/commands.hpp"
#include "engine/config/recipe_io.hpp"
#include "engine/train/stop_request.hpp"
#include "engine/train/trainer.hpp"
#include "parallel/mpi_world.hpp"
#include "parallel/process_groups.hpp"

namespace loom::cli {

namespace {
// The command line as a shell would take it back (arguments with spaces or quotes quoted).
std::string command_line(int argc, char** argv) {
  std::string out;
  for (int i = 0; i < argc; ++i) {
    const std::string arg = argv[i];
    if (i) out += ' ';
    if (!arg.empty() && arg.find_first_of(" \t\"'$\\") == std::string::npos) {
      out += arg;
    } else {
      out += '\'';
      for (char c : arg) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
      out += '\'';
    }
  }
  return out;
}
}  // namespace

int cmd_train(const RecipeArgs& a, int* argc, char*** argv) {
  const std::string command = command_line(*argc, *argv);
  parallel::MpiWorld world(argc, argv);
  install_stop_signals();  // after MPI_Init, so that these handlers are the ones in place
  auto report = [&](std::string error) {
    error = world.agree_on_error(error);
    if (!error.empty() && world.rank() == 0) std::fprintf(stderr, "loom: error: %s\n", error.c_str());
    return error.empty();
  };
  Recipe r;
  std::string error;
  try {
    r = load_recipe(a.recipe, a.sets);
    resolve_world(r, world.size());
  } catch (const std::exception& e) {
    error = e.what();
  }
  if (!report(error)) return 2;

  std::unique_ptr<parallel::ProcessGroups> groups;
  std::unique_ptr<Trainer> trainer;
  try {
    groups = std::make_unique<parallel::ProcessGroups>(
        world.comm(), parallel::GridLayout{r.parallel.tp, r.parallel.dp, r.parallel.pp});
    trainer = std::make_unique<Trainer>(r, *groups, command);
  } catch (const std::exception& e) {
    error = e.what();
  }
  if (!report(error)) return 2;

  int status = 0;
  try {
    TrainSummary s = trainer->run();
    if (!s.stopped_early.empty()) {
      status = kExitResumable;
      if (world.rank() == 0)
        std::printf("loom: stopped at step %lld of %lld on %s; %s run the same command again to resume "
                    "(exit status %d)\n",
                    (long long)s.steps, (long long)r.train.steps, s.stopped_early.c_str(),
                    r.checkpoint.dir.empty() ? "checkpoint.dir is not set, so nothing was saved;"
                                             : "a checkpoint was saved;",
                    kExitResumable);
    }
    if (world.rank() == 0)
      std::printf("loom: trained %lld steps, final loss %.4f%s, %.0f tokens/s, gradient reduction not hidden: %.1f ms "
                  "in all, checkpoint stalls %.1f ms in all\n",
                  (long long)s.steps, s.final_loss,
                  s.final_val_loss >= 0 ? (", val loss " + std::to_string(s.final_val_loss).substr(0, 6)).c_str() : "",
                  s.tokens_per_s, s.comm_wait_s * 1e3, s.checkpoint_stall_s * 1e3);
  } catch (const std::exception& e) {
    trainer->note_failure(e.what());  // run.json, where this rank is rank 0
    world.abort(e.what(), 1);
  }
  trainer.reset();
  groups.reset();
  return status;
}

}  // namespace loom::cli
