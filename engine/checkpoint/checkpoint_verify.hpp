#pragma once
// Checkpoints read by one process, without MPI collectives: what a checkpoint.dir holds, whether
// a checkpoint is intact, and what it contains (`loom ckpt inspect`). Rank 0 of a training job
// uses the cheap check before any rank opens the file.
#include <string>
#include <vector>

namespace loom {

// Complete checkpoints in `dir` (Loom's names, with a manifest of the same step), oldest step
// first; what else is there is ignored (checkpoint_catalog.hpp).
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
