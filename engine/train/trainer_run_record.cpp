// The Trainer's run record (run.json, rank 0): the session's entry, an elastic resume's resize,
// reports recorded as warnings, and a failure noted before the job is aborted.
#include <cstdio>

#include "engine/config/recipe_io.hpp"
#include "engine/train/trainer.hpp"
#include "parallel/host_collectives.hpp"

namespace loom {

void Trainer::start_run_record(const std::string& command, const std::vector<std::string>& hosts) {
  SessionInfo info;
  info.command = command;
  info.recipe_yaml = recipe_to_yaml(r_);
  info.backend = backend_->name();
  info.mpi_version = parallel::mpi_library_version();
  if (auto cut = info.mpi_version.find_first_of("\r\n,"); cut != std::string::npos) info.mpi_version.resize(cut);
  for (int i = 0; i < groups_.layout().world(); ++i) {
    const auto c = groups_.layout().coord(i);
    info.ranks.push_back({i, c.tp, c.dp, c.pp, hosts[size_t(i)]});
  }
  info.start_step = resumed_.steps_done;
  info.resumed_from = resumed_.path;
  run_record_ = std::make_unique<RunRecord>(r_.log.dir, info);
}

// An elastic resume: the checkpoint was saved under another process grid (a requeue onto fewer
// or more nodes). The global batch stays the recipe's (the accumulation absorbs the new dp; the
// data position counts samples), and the session's entry in run.json records the resize.
void Trainer::note_resize() {
  const auto& was = resumed_.layout;
  const auto& p = r_.parallel;
  if (resumed_.path.empty() || was.dp <= 0 || (was.tp == p.tp && was.pp == p.pp && was.dp == p.dp)) return;
  const int world_was = was.tp * was.pp * was.dp;
  // train.global_batch auto (micro_batch x dp) changes with dp: say so rather than that it stays.
  const int64_t gb = batch_.batch(), gb_was = resumed_.data.global_batch > 0 ? resumed_.data.global_batch : gb;
  char batch[96];
  if (gb_was == gb)
    std::snprintf(batch, sizeof batch, "the global batch stays %lld", (long long)gb);
  else
    std::snprintf(batch, sizeof batch, "the global batch changes from %lld to %lld", (long long)gb_was, (long long)gb);
  std::printf("loom: %s: the checkpoint was saved by %d ranks (tp %d, pp %d, dp %d); this run has %d "
              "(tp %d, pp %d, dp %d, %d micro-batches of %d per rank per step): %s\n",
              world_was == r_.world ? "resume under another layout" : "elastic resume", world_was, was.tp, was.pp,
              was.dp, r_.world, p.tp, p.pp, p.dp, int(gb / batch_.unit()), r_.train.micro_batch,
              batch);
  record_in_run_json("resized", {{"from", {{"world", world_was}, {"tp", was.tp}, {"pp", was.pp}, {"dp", was.dp},
                                           {"zero", was.zero}, {"global_batch", gb_was}}},
                                 {"to", {{"world", r_.world}, {"tp", p.tp}, {"pp", p.pp}, {"dp", p.dp},
                                         {"zero", p.zero}, {"grad_accum", gb / batch_.unit()}, {"global_batch", gb}}},
                                 {"global_batch", gb},
                                 {"at_step", resumed_.steps_done}});
}

// A report in run.json is worth a warning, not the run: only rank 0 writes, and a throw here would
// leave the other ranks waiting in the next collective.
void Trainer::record_in_run_json(const std::string& key, nlohmann::json value) {
  if (!run_record_) return;
  try {
    run_record_->set(key, std::move(value));
  } catch (const std::exception& e) {
    std::fprintf(stderr, "loom: warning: could not record %s in run.json: %s\n", key.c_str(), e.what());
  }
}

void Trainer::note_failure(const std::string& error) {
  if (run_record_) run_record_->finish(steps_done_, 1, error);  // -1: failed before the loop
}

}  // namespace loom
