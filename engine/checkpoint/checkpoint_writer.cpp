// Writing one checkpoint: every rank's slices into one HDF5 file at once, their checksums, then
// on rank 0 the manifest, the rename into place, `latest` and retention (docs/checkpoints.md).
#include <sys/statvfs.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <stdexcept>

#include "engine/checkpoint/checkpoint_catalog.hpp"
#include "engine/checkpoint/checkpoint_layout.hpp"
#include "engine/checkpoint/checkpointer.hpp"
#include "engine/checkpoint/lora_manifest.hpp"
#include "engine/checkpoint/h5_tensor_file.hpp"
#include "engine/checkpoint/slice_checksum.hpp"
#include "engine/checkpoint/slice_plan.hpp"
#include "engine/util/atomic_file.hpp"
#include "engine/util/utc_time.hpp"
#include "loom_version.hpp"
#include "parallel/host_collectives.hpp"

namespace loom {
namespace fs = std::filesystem;
namespace {

std::string step_name(int64_t step) { return checkpoint_name(step); }

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// Free bytes for an unprivileged writer on the filesystem holding `dir` (-1 if unknown).
int64_t free_bytes(const std::string& dir) {
  struct statvfs v {};
  if (::statvfs(dir.c_str(), &v) != 0) return -1;
  return int64_t(v.f_bavail) * int64_t(v.f_frsize);
}

// Now in UTC, for file names: 20261123T154500Z.
std::string utc_stamp() { return utc_now("%Y%m%dT%H%M%SZ"); }

// manifest.json: what was saved (`file`: model.h5's size, CRC-32C and datasets), where the data
// stream stood, the state's health, the layout it was saved under and the recipe.
nlohmann::json manifest(int64_t steps_done, const SavedDataPosition& data, const StateHealth& h, bool clean,
                        bool finite, nlohmann::json file, nlohmann::json layout, const ModelConfig& m,
                        const std::string& recipe_yaml) {
  return {
      {"format", "loom-checkpoint"},
      {"version", 1},
      {"step", steps_done},
      {"loader",
       {{"next_step", data.loader.next_step},
        {"next_sample", data.loader.next_sample},
        {"seed", data.seed},
        {"global_batch", data.global_batch},
        {"samples_per_epoch", data.samples_per_epoch},
        {"data_tokens", data.data_tokens},
        {"data_crc32c", data.data_crc32c},
        {"val_tokens", data.val_tokens >= 0 ? nlohmann::json(data.val_tokens) : nlohmann::json(nullptr)},
        {"val_crc32c", data.val_tokens >= 0 ? nlohmann::json(data.val_crc32c) : nlohmann::json(nullptr)},
        {"blend", data.blend}}},
      {"health",
       {{"clean", clean},
        {"loss", std::isfinite(h.loss) ? nlohmann::json(h.loss) : nlohmann::json(nullptr)},
        {"params_finite", finite},
        {"first_bad_step", h.first_bad_step >= 0 ? nlohmann::json(h.first_bad_step) : nlohmann::json(nullptr)}}},
      {"files", nlohmann::json::array({std::move(file)})},
      {"layout", std::move(layout)},
      {"model",
       {{"n_layer", m.n_layer}, {"n_head", m.n_head}, {"d_model", m.d_model}, {"vocab_size", m.vocab_size},
        {"seq_len", m.seq_len}}},
      {"rng", "none: initialisation is counter-based and sampling a pure function of "
              "(train.seed, position); the loader state is loader.next_sample"},
      {"loom_version", LOOM_VERSION},
      {"git_commit", LOOM_GIT_COMMIT},
      {"recipe", recipe_yaml}};
}

}  // namespace

void Checkpointer::write(const Snapshot& snap, parallel::MpiCommunicator& world) {
  auto t0 = std::chrono::steady_clock::now();
  const int rank = world.rank();
  const int64_t steps_done = snap.steps_done;
  const fs::path root = cfg_.dir;
  const fs::path partial = root / (step_name(steps_done) + ".partial");
  const fs::path final_dir = root / step_name(steps_done);
  const std::vector<GlobalTensor> tensors = global_tensors(model_.shape());
  const std::vector<uint64_t> bytes_of = dataset_bytes(tensors);
  // Every parameter finite on every rank: part of what makes a state clean (retention keeps the
  // last clean checkpoint however many saves follow).
  const bool finite = parallel::all_true(world, snap.finite);
  std::string error;
  if (rank == 0) {
    try {
      fs::create_directories(root);
      // Leftovers of a save that died go; a user's directory of that name is set aside instead.
      if (fs::exists(partial)) {
        if (const std::string foreign = foreign_file_in_partial(partial.string()); !foreign.empty()) {
          const fs::path aside = partial.string() + ".kept-" + std::to_string(::getpid());
          fs::rename(partial, aside);
          std::fprintf(stderr, "loom: warning: %s holds %s, which a save does not write: moved to %s\n",
                       partial.c_str(), foreign.c_str(), aside.c_str());
        }
      }
      fs::remove_all(partial);
      // A full disk is reported before anything is written (the file is the datasets plus a
      // little HDF5 metadata); a disk that fills during the write is reported by the write.
      uint64_t need = 0;
      for (uint64_t b : bytes_of) need += b;
      const int64_t avail = free_bytes(root.string());
      if (avail >= 0 && uint64_t(avail) < need)
        throw std::runtime_error(root.string() + ": No space left on device: this checkpoint needs " +
                                 std::to_string(need / 1000000 + 1) + " MB, the filesystem has " +
                                 std::to_string(avail / 1000000) + " MB free (older checkpoints are intact)");
      fs::create_directories(partial);
    } catch (const std::exception& e) {
      error = std::string("checkpoint.dir: ") + e.what();
    }
  }
  if (error = parallel::broadcast_string(world, error); !error.empty()) throw std::runtime_error(error);
  // An agreed failure from here on: rank 0 removes the partial directory (ours, incomplete, and
  // taking the space a retry needs), and every rank throws, which ends in MPI_Abort: the barrier
  // keeps any rank from aborting before the removal.
  auto fail = [&](const std::string& why) {
    std::error_code ignored;
    if (rank == 0) fs::remove_all(partial, ignored);
    parallel::barrier_unwatched(world);
    throw std::runtime_error("saving checkpoint " + final_dir.string() + " failed: " + why);
  };
  // Every rank sees the directory rank 0 just made, before the collective file creation: a rank
  // whose create failed alone would leave the others waiting inside HDF5. (Checked at start as
  // well, but a node can lose a mount in between.)
  if (rank != 0)
    error = unseen_by_this_rank(partial.string(), "checkpoint.dir=" + root.string() + ": rank 0 made " + partial.string());
  if (error = parallel::agree_on_error(error, world); !error.empty()) fail(error);
  SliceChecksums sums;  // of what this rank writes, taken from memory as it is written
  {
    // A failed write (a full disk) does not throw here: every rank must go on making the same
    // collective HDF5 calls; the ranks agree on the first error once the file is closed.
    H5TensorFile f = H5TensorFile::create((partial / kCheckpointFile).string(), world);
    for (size_t t = 0; t < tensors.size(); ++t) {
      const GlobalTensor& g = tensors[t];
      for (size_t gi = 0; gi < 3; ++gi) {
        const size_t d = 3 * t + gi;
        const ParamInfo* mine = snap.writes[d];  // this rank writes its slice (the canonical holder)
        const TensorSlice s = mine ? slice_of(*mine) : TensorSlice{};
        const float* data = mine ? snap.slices.data() + snap.at[d] : nullptr;
        std::string bad = f.write(kCheckpointGroups[gi] + g.name, g.shape, mine ? &s : nullptr, data);
        if (error.empty()) error = std::move(bad);
        if (mine) sums.add(uint32_t(d), g.shape, s, data);
      }
    }
    f.set_attr("loom_checkpoint_version", "1");
    f.set_attr("step", std::to_string(steps_done));
    if (std::string bad = f.close_checked(); error.empty()) error = std::move(bad);
  }
  if (error = parallel::agree_on_error(error, world); !error.empty()) fail(error);
  std::vector<uint32_t> dataset_crc;
  try {
    dataset_crc = sums.combine_on_rank0(bytes_of, world);
  } catch (const std::exception& e) {
    error = e.what();
  }
  parallel::barrier_unwatched(world);  // every rank has closed the file
  if (rank == 0 && error.empty()) {
    try {
      const std::string file = (partial / kCheckpointFile).string();
      const double data_s = seconds_since(t0);
      fsync_path(file);
      const double fsync_s = seconds_since(t0) - data_s;
      const auto extents = H5TensorFile::extents(file, dataset_names(model_.shape()));
      for (size_t i = 0; i < extents.size(); ++i)
        if (extents[i].bytes != bytes_of[i])
          throw std::runtime_error(file + ": dataset " + extents[i].name + " is stored in " +
                                   std::to_string(extents[i].bytes) + " bytes, expected " + std::to_string(bytes_of[i]));
      const uint64_t bytes = fs::file_size(file);
      const uint32_t crc = file_crc_from_datasets(file, bytes, extents, dataset_crc);
      nlohmann::json datasets = nlohmann::json::array();
      for (size_t i = 0; i < extents.size(); ++i)
        datasets.push_back({{"name", extents[i].name}, {"offset", extents[i].offset}, {"bytes", extents[i].bytes},
                            {"crc32c", dataset_crc[i]}});
      const bool clean = finite && snap.health.first_bad_step < 0;
      const parallel::GridLayout& layout = groups_.layout();
      nlohmann::json man = manifest(
          snap.steps_done, snap.data, snap.health, clean, finite,
          {{"name", kCheckpointFile}, {"bytes", bytes}, {"crc32c", crc}, {"datasets", datasets}},
          {{"tp", layout.tp}, {"pp", layout.pp}, {"dp", layout.dp}, {"zero", optim_.zero_stage()},
           {"world", layout.world()}},
          setup_.model, setup_.recipe_yaml);
      // LoRA: the adapters' spec and the frozen base they adapt (not in this checkpoint).
      if (model_.shape().lora.on()) {
        man["model"]["lora"] = lora_to_json(model_.shape().lora);
        man["model"]["base"] = setup_.base_path.empty() ? setup_.model.init_from : setup_.base_path;
        if (!setup_.base_fingerprint.empty()) man["model"]["base_fingerprint"] = setup_.base_fingerprint;
      }
      // AdamW's update count, the age of its moments (bias correction): below the step after a
      // skipped step. A checkpoint without it (older) is taken to have skipped none.
      man["optimizer"] = {{"updates", snap.optimizer_updates}};
      // fp16's dynamic loss scale, so a resumed run goes on with it (absent without fp16).
      if (snap.loss_scale.scale > 0)
        man["loss_scale"] = {{"scale", snap.loss_scale.scale}, {"good_steps", snap.loss_scale.good_steps}};
      // The gradient noise scale's moving averages (raw, not bias-corrected), so a resumed run's
      // B_simple goes on from them (absent where it is not measured).
      if (snap.noise.n > 0)
        man["noise_scale"] = {{"grad_sq", snap.noise.g2}, {"trace", snap.noise.tr}, {"weight", snap.noise.weight},
                              {"count", snap.noise.n}};
      write_file_atomically((partial / "manifest.json").string(), man.dump(2) + "\n");
      // The first save after a resume: the checkpoints numbered above the one resumed from are
      // another history's (the one this run went back from, or a damaged newer one fallen back
      // past), and so is every one here when it was resumed from elsewhere (another directory,
      // a set-aside or abandoned checkpoint). Set aside like a replaced step, before this one
      // takes its place and before `latest` moves: a crash in between leaves `latest` naming
      // nothing complete, and the newest-first fallback finds this history. (The checkpoint of
      // this very step, if any, is set aside just below.)
      if (set_aside_above_ >= 0) {
        for (const CheckpointEntry& e : scan_checkpoints(root.string()).complete) {
          if (e.step == steps_done || (!set_aside_all_ && e.step <= set_aside_above_)) continue;
          const fs::path aside = fs::path(e.path).string() + ".replaced-" + utc_stamp();
          fs::rename(e.path, aside);
          if (set_aside_all_)
            std::printf("loom: %s belongs to the history this directory held before this run resumed from a "
                        "checkpoint outside it (step %lld): kept as %s, never counted by keep_last or resumed from "
                        "automatically\n",
                        e.path.c_str(), (long long)set_aside_above_, aside.string().c_str());
          else
            std::printf("loom: %s is numbered above step %lld, where this run continues (a history it went back "
                        "from, or a damaged checkpoint it fell back past): kept as %s, never counted by keep_last "
                        "or resumed from automatically\n",
                        e.path.c_str(), (long long)set_aside_above_, aside.string().c_str());
        }
      }
      if (fs::exists(final_dir)) {
        // A checkpoint of the same step from an earlier history (this run resumed from an older
        // one): set aside, never deleted, and said so. Renamed before the new one takes its name,
        // so a crash in between loses neither.
        const fs::path aside = root / (step_name(steps_done) + ".replaced-" + utc_stamp());
        const bool checkpoint = fs::is_directory(final_dir) && fs::exists(final_dir / "manifest.json");
        fs::rename(final_dir, aside);
        if (checkpoint)
          std::printf("loom: step %lld was saved before by an earlier history of this run; that checkpoint is kept "
                      "as %s\n",
                      (long long)steps_done, aside.string().c_str());
        else  // a user's file or folder of that name, or a damaged checkpoint without its manifest
          std::printf("loom: %s was in the way of this save and is not a complete checkpoint (no manifest.json); it "
                      "is kept as %s\n",
                      final_dir.string().c_str(), aside.string().c_str());
      }
      fs::rename(partial, final_dir);
      fsync_path(root.string());
      write_file_atomically((root / "latest").string(), step_name(steps_done) + "\n");
      const double complete_s = seconds_since(t0);
      // Prune only now that a newer complete checkpoint exists, and only what retention allows.
      const CheckpointCatalog catalog = scan_checkpoints(root.string());
      const Retention keep = plan_retention(catalog, cfg_.keep_last);
      std::string pruned;  // their names, for the log: what keep_last deleted is said
      for (const std::string& p : keep.prune) {
        std::error_code ec;  // the save is complete: a checkpoint that will not go is a warning
        fs::remove_all(p, ec);
        if (ec) std::fprintf(stderr, "loom: warning: could not prune %s: %s\n", p.c_str(), ec.message().c_str());
        else pruned += (pruned.empty() ? "" : ", ") + fs::path(p).filename().string();
      }
      std::printf("loom: saved checkpoint %s (%.1f MB complete in %.2f s, %.2f GB/s: data written in %.2f s, fsync "
                  "%.2f s, checksums, manifest and rename %.2f s; %s in %.2f s)%s%s\n",
                  final_dir.string().c_str(), bytes / 1e6, complete_s, bytes / 1e9 / complete_s, data_s, fsync_s,
                  complete_s - data_s - fsync_s, (pruned.empty() ? "none pruned" : "pruned " + pruned).c_str(),
                  seconds_since(t0) - complete_s,
                  cfg_.async ? " [async]" : "",
                  clean ? "" : " [not clean: saved after the run went non-finite or diverged]");
      for (const PinnedCheckpoint& pin : keep.pinned)
        std::printf("loom: keeping %s beyond checkpoint.keep_last = %d: it is the last clean checkpoint, saved before "
                    "the run went non-finite or diverged at step %lld\n",
                    pin.path.c_str(), cfg_.keep_last, (long long)pin.before_step);
      set_aside_above_ = -1;
      set_aside_all_ = false;
      std::fflush(stdout);
    } catch (const std::exception& e) {
      error = e.what();
    }
  }
  // Every rank learns of a failure on rank 0 (no rank waits for another that gave up); the
  // .partial directory goes (it may hold gigabytes a retry needs), older checkpoints are untouched.
  if (error = parallel::broadcast_string(world, error); !error.empty()) {
    if (rank == 0) {
      std::error_code ec;
      fs::remove_all(partial, ec);
    }
    throw std::runtime_error("saving checkpoint " + final_dir.string() + " failed: " + error);
  }
}

}  // namespace loom
