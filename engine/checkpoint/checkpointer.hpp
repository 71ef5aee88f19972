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
#include <mpi.h>

#include <cstdint>
#include <exception>
#include <memory>
#include <thread>
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
  ~Checkpointer();  // waits for an async save in flight

  // Collective. Writes the checkpoint of the state after `steps_done` steps. With
  // checkpoint.async the state is copied to host memory here and written by a background thread
  // (over its own communicator) while training continues; a second save first waits for the
  // first. Returns the seconds the caller was held up.
  double save(int64_t steps_done, int64_t loader_next_step);
  // Waits for a save in flight (rethrows its error). Collective in effect: every rank calls it.
  void wait();
  // Collective. Chooses the checkpoint per checkpoint.resume (auto: the newest complete one that
  // verifies, falling back past damaged ones with a message naming them) and loads it.
  ResumePoint resume();

 private:
  struct Snapshot;
  // Collective. Loads `dir` (which passed precheck_checkpoint) and checks every dataset's
  // CRC-32C from the slices read; returns what is wrong ("" if nothing), the same on every rank.
  std::string load(const std::string& dir, ResumePoint& at);
  std::vector<std::string> candidates_on_rank0() const;
  void write(const Snapshot& snap, MPI_Comm comm);

  const Recipe& r_;
  parallel::ProcessGroups& groups_;
  Gpt& model_;
  AdamW& optim_;
  parallel::GradSync& sync_;
  MPI_Comm io_comm_ = MPI_COMM_NULL;  // the background writer's duplicate of the world
  std::thread writer_;
  std::exception_ptr writer_error_;
  std::shared_ptr<Snapshot> in_flight_;
  std::shared_ptr<Snapshot> snapshot_;  // host buffers kept between saves
};

// Rank-0 helpers, also used by `loom ckpt`.
// Complete checkpoints (those with a manifest) in `dir`, oldest first.
std::vector<std::string> list_checkpoints(const std::string& dir);
// "" if the checkpoint's manifest is present and every file it lists has its size and CRC-32C;
// otherwise what is wrong.
std::string verify_checkpoint(const std::string& ckpt_dir);
// The cheap part of verify_checkpoint: the manifest, the file sizes, and the CRC-32C of the
// bytes outside the datasets (HDF5 metadata), which must be sound before HDF5 opens the file.
// The datasets' own checksums are checked by the load, on the bytes it reads.
std::string precheck_checkpoint(const std::string& ckpt_dir);
// Human-readable summary: step, layout, recipe, every tensor with its shape and data CRC.
std::string inspect_checkpoint(const std::string& ckpt_dir);

}  // namespace loom
