// `loom train RECIPE`: every rank loads and checks the recipe and builds its trainer; the ranks
// agree on the first error before anything runs (printed once, every rank exits 2). An error
// after that point aborts the whole job (exit 1), so no rank is left waiting for another.
#include <algorithm>
#include <cstdio>
#include <cstring>
#include <memory>

#include "engine/cli/commands.hpp"
#include "engine/config/recipe_io.hpp"
#include "engine/train/stop_request.hpp"
#include "engine/train/trainer.hpp"
#include "engine/util/job_error.hpp"
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
// The end-of-run lines (rank 0): what this session did, not the whole run's history.
void print_summary(const TrainSummary& s, const Recipe& r, int status) {
  const int64_t ran = s.steps - s.start_step;
  if (ran <= 0) {
    if (r.train.stop_at_step > 0 && s.steps >= r.train.stop_at_step && s.steps < r.train.steps)
      std::printf("loom: nothing to train: the run is at step %lld and train.stop_at_step is %lld (raise it, or set it "
                  "to 0, to train on)\n",
                  (long long)s.steps, (long long)r.train.stop_at_step);
    else
      std::printf("loom: nothing to train: the run is at step %lld and train.steps is %lld (raise train.steps to train "
                  "on)\n",
                  (long long)s.steps, (long long)r.train.steps);
    return;
  }
  if (!s.stopped_early.empty())
    std::printf("loom: stopped at step %lld of %lld on %s; %s (exit status %d)\n", (long long)s.steps,
                (long long)r.train.steps, s.stopped_early.c_str(),
                status == kExitResumable ? "a checkpoint was saved: run the same command again to resume"
                                         : "checkpoint.dir is not set, so nothing was saved: running again starts over",
                status);
  char val[96] = "";
  if (s.final_val_loss >= 0) std::snprintf(val, sizeof val, ", val loss %.4f", s.final_val_loss);
  if (s.final_choice_acc_norm >= 0)
    std::snprintf(val + std::strlen(val), sizeof val - std::strlen(val), ", log.choices acc_norm %.4f",
                  s.final_choice_acc_norm);
  char from[64] = "";
  if (s.start_step > 0) std::snprintf(from, sizeof from, " (resumed at step %lld)", (long long)s.start_step);
  char rate[64] = "", hidden[96] = "";
  if (s.grad_reduce_s > 0 && r.parallel.dp > 1)
    std::snprintf(hidden, sizeof hidden, " (of %.1f ms of reduction: %.0f%% hidden)", s.grad_reduce_s * 1e3,
                  100 * std::clamp(1 - s.comm_wait_s / s.grad_reduce_s, 0.0, 1.0));
  if (s.tokens_per_s > 0) std::snprintf(rate, sizeof rate, ", %.0f tokens/s", s.tokens_per_s);
  std::printf("loom: trained %lld steps this session, to step %lld%s, final loss %.4f%s%s, gradient reduction not "
              "hidden: %.1f ms in all%s, checkpoint stalls %.1f ms in all\n",
              (long long)ran, (long long)s.steps, from, s.final_loss, val, rate, s.comm_wait_s * 1e3, hidden,
              s.checkpoint_stall_s * 1e3);
}

}  // namespace

int cmd_train(const RecipeArgs& a, int* argc, char*** argv) {
  const std::string command = command_line(*argc, *argv);
  parallel::MpiWorld world(argc, argv);
  install_stop_signals();  // after MPI's init, so that these handlers are the ones in place
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
        world.comm(), parallel::GridLayout{r.parallel.tp, r.parallel.dp, r.parallel.pp},
        parallel::parse_all_reduce_algo(r.parallel.allreduce));
    trainer = std::make_unique<Trainer>(r, *groups, command);
  } catch (const std::exception& e) {
    error = e.what();
  }
  if (!report(error)) return 2;

  int status = 0;
  try {
    TrainSummary s = trainer->run();
    status = exit_status(s);
    if (world.rank() == 0) print_summary(s, r, status);
  } catch (const JobError& e) {
    // Every rank raised it at the same point: rank 0 prints and records it, then all end in
    // order (a race of aborts could kill rank 0 before its message is out).
    if (world.rank() == 0) std::fprintf(stderr, "loom: error: %s\n", e.what());
    trainer->note_failure(e.what());  // run.json, where this rank is rank 0
    std::fflush(stderr);
    world.agree_on_error("");  // a barrier: rank 0 has printed and recorded before any rank exits
    status = 1;
  } catch (const std::exception& e) {
    trainer->note_failure(e.what());  // run.json, where this rank is rank 0
    world.abort(e.what(), 1);
  }
  trainer.reset();
  groups.reset();
  return status;
}

}  // namespace loom::cli
