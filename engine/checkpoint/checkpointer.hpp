#pragma once
// Sharded, atomic, verified checkpoints (docs/checkpoints.md).
//
// A checkpoint is checkpoint.dir/step_NNNNNNNN/: model.h5, one HDF5 file written by all ranks at
// once (parallel HDF5), holding every parameter and both Adam moments as GLOBAL tensors under
// their global names, and manifest.json, written last by rank 0 with the file's size and CRC-32C,
// the step, the layout, the recipe and the git commit. The directory is written as
// step_NNNNNNNN.partial and renamed into place only when complete, then `latest` is updated and
// older complete checkpoints beyond checkpoint.keep_last are pruned. A directory without a valid
// manifest is never loaded. Loading reads only this rank's slices of the global tensors, so a
// checkpoint resumes under any layout the model allows (tp, pp, dp and zero all free to change).
#include <cstdint>
#include <string>
#include <vector>

#include "engine/config/recipe.hpp"
#include "engine/model/gpt.hpp"
#include "engine/optim/adamw.hpp"
#include "parallel/grad_sync.hpp"
#include "parallel/process_groups.hpp"

namespace loom {

struct ResumePoint {
  std::string path;        // the checkpoint directory loaded ("" if training starts fresh)
  int64_t steps_done = 0;  // optimizer steps already taken
  int64_t loader_next_step = 0;
};

class Checkpointer {
 public:
  Checkpointer(const Recipe& recipe, parallel::ProcessGroups& groups, Gpt& model, AdamW& optim,
               parallel::GradSync& sync);

  // Collective. Writes the checkpoint of the state after `steps_done` steps.
  void save(int64_t steps_done, int64_t loader_next_step);
  // Collective. Chooses the checkpoint per checkpoint.resume (auto: the newest complete one that
  // verifies, falling back past damaged ones with a message naming them) and loads it.
  ResumePoint resume();

 private:
  void load(const std::string& dir, ResumePoint& at);
  std::string choose_on_rank0(std::string& error);

  const Recipe& r_;
  parallel::ProcessGroups& groups_;
  Gpt& model_;
  AdamW& optim_;
  parallel::GradSync& sync_;
};

// Rank-0 helpers, also used by `loom ckpt`.
// Complete checkpoints (those with a manifest) in `dir`, oldest first.
std::vector<std::string> list_checkpoints(const std::string& dir);
// "" if the checkpoint's manifest is present and every file it lists has its size and CRC-32C;
// otherwise what is wrong.
std::string verify_checkpoint(const std::string& ckpt_dir);
// Human-readable summary: step, layout, recipe, every tensor with its shape and data CRC.
std::string inspect_checkpoint(const std::string& ckpt_dir);

}  // namespace loom
