#pragma once
// What a checkpoint.dir holds, and which of its checkpoints may be deleted (docs/checkpoints.md,
// "Retention"). Rank-0 helpers with no MPI: the checkpointer and `loom ckpt` use them.
//
// Only directories named exactly step_NNNNNNNN (eight or more digits, the names Loom writes)
// [a checkpoint of a step saved again by a later history is set aside as
// step_NNNNNNNN.replaced-TIME, kept and named, never resumed from automatically]
// whose manifest.json records that same step are checkpoints. Anything else in the directory (a
// copied step_10_backup, a step_00000020 whose manifest was deleted) is reported and ignored:
// never resumed from, never deleted. Checkpoints are ordered by the step recorded in their
// manifest, never by name.
#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

namespace loom {

// A manifest's health section (absent in checkpoints of older Loom versions: taken as clean).
struct ManifestHealth {
  bool clean = true;
  double loss = 0;              // the last step's loss (0 if not recorded or not finite)
  int64_t first_bad_step = -1;  // the first non-finite or diverged step (1-based), -1 if none
};
ManifestHealth manifest_health(const nlohmann::json& manifest);

struct CheckpointEntry {
  std::string path;
  int64_t step = 0;
  // The manifest's health section (absent in checkpoints of older Loom versions: taken as clean).
  // clean: no non-finite or diverged step happened in the run's history up to this state, and
  // every parameter is finite.
  bool clean = true;
  int64_t first_bad_step = -1;  // the first such step (1-based), -1 if none
};

struct CheckpointCatalog {
  std::vector<CheckpointEntry> complete;  // oldest first
  std::vector<std::string> ignored;       // one line per entry that is not a usable checkpoint, and why
  std::string latest;                     // the checkpoint the `latest` file names, if complete; else ""
  int64_t latest_step = -1;               // the step `latest` names, complete or not (-1: none readable).
                                          // Checkpoints numbered above it are an abandoned history.
};

// True if `name` is a checkpoint name Loom writes; sets *step.
// Only the canonical spelling counts: step_00000010, not step_000000010.
bool parse_checkpoint_name(const std::string& name, int64_t* step);
std::string checkpoint_name(int64_t step);
// The first entry of a `step_N.partial` directory that a save does not write (model.h5,
// manifest.json and its temporary), "" if none: only a directory holding nothing else is an
// interrupted save of Loom's, to be removed; anything else in it is a user's.
std::string foreign_file_in_partial(const std::string& dir);

// Reads `dir` (a checkpoint.dir). Missing directory: an empty catalog.
CheckpointCatalog scan_checkpoints(const std::string& dir);

// The candidates for checkpoint.resume=auto, the one to try first first: the one `latest` names
// (what the last session saved), then the older ones, newest step first. Checkpoints numbered
// above `latest`'s are an abandoned history (a session resumed from an older checkpoint and saved
// since): never candidates, even when `latest`'s own checkpoint is damaged (`newer_than_latest`
// gets them, for the message). Without a usable `latest`, every checkpoint, newest first.
std::vector<std::string> resume_order(const CheckpointCatalog& c, std::vector<std::string>* newer_than_latest = nullptr);

struct PinnedCheckpoint {
  std::string path;
  int64_t before_step = 0;  // the bad step it was saved before
};
struct Retention {
  std::vector<std::string> prune;         // oldest first
  std::vector<PinnedCheckpoint> pinned;   // kept beyond keep_last (only those keep_last would delete)
};
// keep_last newest complete checkpoints of the current history (up to `latest`'s step) are kept;
// so is the one `latest` names; so is, for every checkpoint that is not clean, the newest clean
// one saved before its history's first bad step (the last state before that run went non-finite
// or diverged), however many saves come after it. Checkpoints numbered above `latest`'s step (an
// abandoned history, never resumed from automatically) are neither counted nor deleted. Nothing
// else is deleted.
Retention plan_retention(const CheckpointCatalog& c, int keep_last);

// The newest clean checkpoint with a step below `step` (any step if step < 0); "" if none.
std::string last_clean_before(const CheckpointCatalog& c, int64_t step);

}  // namespace loom
