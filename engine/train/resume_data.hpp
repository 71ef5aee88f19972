#pragma once
// Where a resumed run's data stream starts, and which recipe changes since the checkpoint a
// resume may not make silently (docs/checkpoints.md, "Resuming under changes").
//
// The stream is a pure function of (train.seed, samples per epoch, position): the checkpoint
// records the position in samples, so a new global batch continues at exactly the next unseen
// sample (no sample skipped or repeated; the change is stated). A new seed or a dataset of
// another size reorders the whole stream: samples already seen this epoch would come again and
// others never. A dataset of the same size whose tokens changed (its DataFingerprint) keeps the
// order but not the samples. Either needs consent (checkpoint.allow_changes=true), and is stated.
#include <cstdint>
#include <string>
#include <vector>

#include "engine/checkpoint/checkpointer.hpp"
#include "engine/config/recipe.hpp"
#include "engine/data/token_dataset.hpp"

namespace loom {

struct DataNow {
  uint64_t seed = 0;
  int64_t global_batch = 0, samples_per_epoch = 0;
  bool schedule_in_samples = false;  // train.batch_policy goodput: the schedule follows sequences trained
  DataFingerprint data;              // of data.train (validate_dataset)
  DataFingerprint val;               // of data.val (tokens 0: no data.val)
  std::string blend{};               // data.train's SampleIndex::blend_order(), "" if no blend
};

// The loader state to start from. `notes` gets one line per change (for rank 0 to print): a
// data.val whose tokens changed too, though it needs no consent (val_loss before and after are
// then over different tokens).
// Throws std::runtime_error naming the keys when a change needs consent that was not given.
// A blend is compared by its parts' shares and sizes (SampleIndex::blend_order): other weights,
// or shards moved between parts, reorder the stream as a new seed does.
LoaderState resume_data_position(const SavedDataPosition& saved, const DataNow& now, bool allow_changes,
                                 std::vector<std::string>* notes);

// The optimizer and schedule keys (lr, min_lr, warmup_steps, the decay's keys, train.steps,
// weight decay, betas, clipping) that differ between the recipe recorded in the checkpoint
// (`saved_recipe_yaml`, "" for a checkpoint that recorded none) and `now`: one line each, for
// rank 0 to print, and where the schedule changed a last line with the learning rate at the
// step the run goes on with (`schedule_at`: its position in the schedule, from_step, or under
// goodput the reference steps trained) against the checkpoint's schedule there. Changing them on
// resume is allowed (a longer run, a lower learning rate, a WSD cooldown) but never silent.
std::vector<std::string> schedule_changes(const std::string& saved_recipe_yaml, const Recipe& now, int64_t from_step,
                                          double schedule_at);

}  // namespace loom
