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
//
// Construction, snapshots and the background save: checkpointer.cpp; writing one checkpoint:
// checkpoint_writer.cpp; choosing what to resume and loading it: checkpoint_loader.cpp; who
// writes which slice: slice_plan.hpp.
#include <cstdint>
#include <exception>
#include <memory>
#include <thread>
#include <string>
#include <vector>

#include "engine/checkpoint/checkpoint_verify.hpp"
#include "engine/config/recipe.hpp"
#include "engine/data/data_loader.hpp"
#include "engine/model/gpt.hpp"
#include "engine/optim/distributed_optimizer.hpp"
#include "engine/optim/loss_scaler.hpp"
#include "engine/optim/noise_scale.hpp"
#include "engine/util/dir_lock.hpp"
#include "engine/util/host_buffer.hpp"
#include "parallel/mpi_communicator.hpp"
#include "parallel/process_groups.hpp"

namespace loom {

// The state's health, recorded in the manifest and used by retention (checkpoint_catalog.hpp).
struct StateHealth {
  double loss = 0;              // the last step's loss
  int64_t first_bad_step = -1;  // the first step (1-based) of the run's history whose loss or
                                // gradient norm was non-finite or whose loss diverged; -1: none
};

// Where the data stream stood, and what it was drawn with: a resume under another seed, global
// batch or dataset is checked against it (engine/train/resume_data.hpp).
struct SavedDataPosition {
  LoaderState loader;               // next_sample < 0: an older checkpoint that did not record it
  uint64_t seed = 0;                // train.seed (all 64 bits are valid seeds)
  bool seed_recorded = false;       // false: an older checkpoint
  int64_t global_batch = -1;
  int64_t samples_per_epoch = -1;
  int64_t data_tokens = -1;         // the training data's DataFingerprint; -1: an older checkpoint
  uint32_t data_crc32c = 0;
  int64_t val_tokens = -1;          // data.val's DataFingerprint; -1: no data.val, or an older checkpoint
  uint32_t val_crc32c = 0;
  std::string blend{};              // data.train's SampleIndex::blend_order(); "" no blend (and older checkpoints)
};

struct ResumePoint {
  std::string path;        // the checkpoint directory loaded ("" if training starts fresh)
  int64_t steps_done = 0;  // optimizer steps already taken
  SavedDataPosition data;
  StateHealth health;
  bool clean = true;        // the manifest's health.clean
  std::string last_clean;   // the newest clean checkpoint in checkpoint.dir ("" if none), rank 0
  LossScaleState loss_scale;  // fp16's loss scale when saved (scale 0: none recorded)
  NoiseScale::State noise;    // the gradient noise scale's moving averages (n 0: none recorded)
  std::string recipe_yaml;    // the recipe the checkpoint recorded ("" if none)
  std::string base_fingerprint;  // LoRA: the frozen base's, as recorded ("" if none)
  // Rank 0: "resumed from PATH (step, layout, read rate)", for the trainer to print once it has
  // accepted the resume (the seed, the data and a LoRA base are checked after loading).
  std::string loaded_line;
  struct Layout {
    int tp = 0, pp = 0, dp = 0, zero = 0;  // the process grid it was saved under (0: unknown)
  } layout;
};

// What the checkpointer uses of the recipe. The layout recorded in each manifest is the process
// grid's and the optimizer's ZeRO stage.
struct CheckpointSetup {
  CheckpointConfig checkpoint;  // the checkpoint section
  ModelConfig model;            // the model section: a checkpoint loads only into the same model
  std::string recipe_yaml;      // the whole recipe (recipe_to_yaml), recorded in each manifest
  // LoRA over model.init_from: the frozen base as opened (its absolute path, a checkpoint.dir
  // resolved to the step loaded) and its fingerprint (PretrainedSource::fingerprint), recorded in
  // each manifest so that the adapters are used again only over the same weights.
  std::string base_path, base_fingerprint;
};
// The recipe's part for the checkpointer.
CheckpointSetup checkpoint_setup(const Recipe& recipe);

// "" if this rank sees `path`, which rank 0 has made or chosen (`what_rank0_has`: "checkpoint.dir=D:
// rank 0 made P"); else the error: its checkpoints are not rank 0's (or the lookup failed). A miss
// is retried for about a second (a network file system's cache of missing names).
std::string unseen_by_this_rank(const std::string& path, const std::string& what_rank0_has);

class Checkpointer {
 public:
  // Collective over the world. With checkpoint.dir set: takes the directory's lock (rank 0),
  // removes interrupted saves of its own, and checks that every rank can create files there and
  // sees the same directory as rank 0.
  Checkpointer(CheckpointSetup setup, parallel::ProcessGroups& groups, Gpt& model, DistributedOptimizer& optim);
  ~Checkpointer();  // waits for an async save in flight

  // Collective. Writes the checkpoint of the state after `steps_done` steps. With
  // checkpoint.async the state is copied to host memory here and written by a background thread
  // (over its own communicator) while training continues; a second save first waits for the
  // first. Returns the seconds the caller was held up.
  double save(int64_t steps_done, const SavedDataPosition& data, const StateHealth& health,
              const LossScaleState& loss_scale = {}, const NoiseScale::State& noise = {});
  // Waits for a save in flight (rethrows its error). Collective in effect: every rank calls it.
  void wait();
  // Collective. Chooses the checkpoint per checkpoint.resume (auto: the one `latest` names, then
  // the newest complete one that verifies, falling back past damaged ones with a message naming
  // them) and loads it.
  ResumePoint resume();
  // Rank 0: the newest clean checkpoint in checkpoint.dir saved before `before_step` (any, if
  // negative): the one to go back to from a history that went bad there. "" if none.
  std::string last_clean_checkpoint(int64_t before_step) const;

 private:
  // The state one save writes: host copies of the slices of parameters and Adam moments this
  // rank writes (slice_plan.hpp's datasets_written; about 1/dp of its (tp, pp) slice's 12 bytes
  // per parameter), packed. Taken a piece at a time (Gpt::visit_params,
  // DistributedOptimizer::visit_moment), so no rank holds a whole copy of its slice, sharded or not.
  struct Snapshot {
    int64_t steps_done = 0;
    int64_t optimizer_updates = 0;  // AdamW's update count (fewer than steps_done after skipped steps)
    SavedDataPosition data;
    StateHealth health;
    LossScaleState loss_scale;
    NoiseScale::State noise;
    std::vector<const ParamInfo*> writes;  // per dataset (3t + g): the parameter whose slice this rank writes, or null
    std::vector<size_t> at;                // per dataset written: where its slice starts in `slices`
    HostBuffer<float> slices;
    bool finite = true;                    // every parameter of this rank's slice is finite
  };
  // Collective over `world` (the world's ranks: the job's or the background writer's
  // communicator). Writes `snap` as checkpoint step_N of checkpoint.dir (checkpoint_writer.cpp).
  void write(const Snapshot& snap, parallel::MpiCommunicator& world);
  // Collective. Loads `dir` (which passed precheck_checkpoint) and checks every dataset's
  // CRC-32C from the slices read; returns what is wrong ("" if nothing), the same on every rank.
  std::string load(const std::string& dir, ResumePoint& at);
  std::vector<std::string> candidates_on_rank0() const;

  const CheckpointSetup setup_;
  const CheckpointConfig& cfg_ = setup_.checkpoint;
  parallel::ProcessGroups& groups_;
  Gpt& model_;
  DistributedOptimizer& optim_;
  std::unique_ptr<parallel::MpiCommunicator> io_comm_;  // the background writer's, over the world
  std::thread writer_;
  std::exception_ptr writer_error_;
  std::shared_ptr<Snapshot> in_flight_;
  std::shared_ptr<Snapshot> snapshot_;  // host buffers kept between saves
  DirLock lock_;                         // rank 0: checkpoint.dir is this job's alone
  // The step this session resumed from, until its first save completes (-1: none pending). That
  // save sets aside every other checkpoint numbered above it: they belong to the history this
  // run branched off, and must neither count in retention nor be resumed from automatically,
  // even where the new history's steps pass theirs.
  int64_t set_aside_above_ = -1;
  // Rank 0: it was resumed from outside this checkpoint.dir's current history (another directory,
  // a .replaced- or an abandoned checkpoint): every checkpoint here is another history's.
  bool set_aside_all_ = false;
};

}  // namespace loom
