// Resuming: which checkpoint (checkpoint.resume, falling back past damaged ones), and loading
// it: every rank reads only its slices of the global tensors, under any layout, and the slices
// read are checked against the manifest's checksums before the state is used.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <stdexcept>

#include "engine/checkpoint/checkpoint_catalog.hpp"
#include "engine/checkpoint/checkpoint_layout.hpp"
#include "engine/checkpoint/checkpointer.hpp"
#include "engine/checkpoint/lora_manifest.hpp"
#include "engine/checkpoint/h5_tensor_file.hpp"
#include "engine/checkpoint/slice_checksum.hpp"
#include "engine/checkpoint/slice_plan.hpp"
#include "engine/util/host_buffer.hpp"
#include "parallel/host_collectives.hpp"
#include "parallel/mpi_world.hpp"

namespace loom {
namespace fs = std::filesystem;

// Rank 0: the candidates for checkpoint.resume, the one to try first first. Entries of
// checkpoint.dir that are not usable checkpoints are named once, here.
std::vector<std::string> Checkpointer::candidates_on_rank0() const {
  const std::string& how = cfg_.resume;
  if (how == "never") return {};
  if (how != "auto") return {how};
  if (cfg_.dir.empty()) return {};
  const CheckpointCatalog c = scan_checkpoints(cfg_.dir);
  for (const std::string& line : c.ignored) std::fprintf(stderr, "loom: warning: %s\n", line.c_str());
  std::vector<std::string> newer;
  std::vector<std::string> order = resume_order(c, &newer);
  for (const std::string& p : newer)
    std::fprintf(stderr, "loom: note: %s is numbered above %s, which `latest` names: a history this run went back "
                 "from, never resumed from automatically (checkpoint.resume=%s to use it)\n",
                 p.c_str(), c.latest.c_str(), p.c_str());
  return order;
}

namespace {
// Whether `path` is one of `dir`'s complete checkpoints of its current history (up to `latest`).
bool in_current_history(const std::string& dir, const std::string& path) {
  const CheckpointCatalog c = scan_checkpoints(dir);
  std::error_code ec;
  for (const CheckpointEntry& e : c.complete)
    if ((c.latest_step < 0 || e.step <= c.latest_step) && fs::equivalent(e.path, path, ec)) return true;
  return c.complete.empty();  // nothing here yet: nothing to keep apart
}
}  // namespace

ResumePoint Checkpointer::resume() {
  parallel::MpiCommunicator& world = groups_.world();
  const bool rank0 = groups_.world_rank() == 0;
  const std::string& how = cfg_.resume;
  const std::vector<std::string> candidates =
      parallel::broadcast_strings(world, rank0 ? candidates_on_rank0() : std::vector<std::string>{});
  for (const std::string& path : candidates) {
    // Rank 0 checks the manifest, the sizes and the bytes outside the datasets (the HDF5
    // metadata) before any rank opens the file; the datasets are checked as they are read.
    std::string bad = parallel::broadcast_string(world, rank0 ? precheck_checkpoint(path) : "");
    ResumePoint at;
    if (bad.empty()) bad = load(path, at);
    if (bad.empty()) {
      set_aside_above_ = at.steps_done;
      if (rank0 && !cfg_.dir.empty()) set_aside_all_ = !in_current_history(cfg_.dir, path);
      if (rank0) {
        const int64_t bad = at.health.first_bad_step >= 0 ? at.health.first_bad_step : at.steps_done;
        at.last_clean = last_clean_checkpoint(bad);
        if (!at.clean)
          std::fprintf(stderr,
                       "loom: warning: %s was saved after the run went non-finite or diverged (first at step %lld); "
                       "the last clean checkpoint before that is %s%s\n",
                       path.c_str(), (long long)bad,
                       at.last_clean.empty() ? "(none)" : at.last_clean.c_str(),
                       at.last_clean.empty() ? "" : " (set checkpoint.resume to it to go back there)");
      }
      return at;
    }
    if (how != "auto") throw std::runtime_error("checkpoint.resume=" + how + ": " + bad);
    if (rank0)
      std::fprintf(stderr, "loom: checkpoint %s is damaged (%s); trying the next newest\n", path.c_str(), bad.c_str());
  }
  if (!candidates.empty())
    throw std::runtime_error("checkpoint.dir=" + cfg_.dir + ": every checkpoint is damaged (see above); "
                             "nothing to resume from. To start afresh, give the run another checkpoint.dir (this "
                             "one keeps the damaged checkpoints for inspection: loom ckpt inspect)");
  return ResumePoint{};
}

std::string Checkpointer::load(const std::string& dir, ResumePoint& at) {
  auto t0 = std::chrono::steady_clock::now();
  parallel::MpiCommunicator& world = groups_.world();
  const bool rank0 = groups_.world_rank() == 0;
  // Every rank reads the manifest of the checkpoint rank 0 chose. One that cannot see it (its
  // checkpoint.dir is another directory) must not leave the others waiting in the next
  // collective, and it is no damage that the next candidate would cure: the job ends, agreed.
  nlohmann::json man;
  parallel::agreed(world, [&] {
    const fs::path path = fs::path(dir) / "manifest.json";
    std::ifstream in(path);
    if (!in) {
      const std::string why = unseen_by_this_rank(path.string(), "rank 0 resumes from " + path.string());
      throw std::runtime_error(why.empty() ? path.string() + ": cannot be read here" : why);
    }
    man = nlohmann::json::parse(in);
  });
  const auto& mm = man["model"];
  const ModelConfig& m = setup_.model;
  std::string differ;  // "model.n_layer is 2 in the recipe, 4 in the checkpoint; ..."
  for (const auto& [key, mine] : {std::pair<const char*, int>{"n_layer", m.n_layer}, {"n_head", m.n_head},
                                  {"d_model", m.d_model}, {"vocab_size", m.vocab_size}, {"seq_len", m.seq_len}})
    if (mm[key] != mine)
      differ += std::string(differ.empty() ? "" : "; ") + "model." + key + " is " + std::to_string(mine) +
                " in the recipe, " + mm[key].dump() + " in the checkpoint";
  if (!differ.empty())
    throw std::runtime_error(dir + ": " + differ +
                             "; a checkpoint loads only into the same model (another shape needs another "
                             "checkpoint.dir)");
  if (!(lora_from_manifest_model(mm) == model_.shape().lora))
    throw std::runtime_error(dir + ": the checkpoint's LoRA adapters " + (mm.contains("lora") ? mm["lora"].dump() : "(none)") +
                             " differ from the recipe's lora section " +
                             (model_.shape().lora.on() ? lora_to_json(model_.shape().lora).dump() : "(none)") +
                             "; start a new checkpoint.dir, or load the weights with model.init_from");
  const ParamTable& table = model_.table();
  const auto coord = groups_.coord();
  const std::vector<GlobalTensor> tensors = global_tensors(model_.shape());
  // Tensor by tensor through one staging buffer (the largest slice), straight into the model and
  // the optimizer: host memory stays at one tensor, not a copy of the whole state.
  size_t largest = 1;
  for (const ParamInfo& p : table.params()) largest = std::max(largest, p.numel);
  HostBuffer<float> staging(largest);
  const std::vector<uint64_t> bytes_of = dataset_bytes(tensors);
  const std::vector<int> owner_dp = spread_over_dp(bytes_of, groups_.layout().dp);
  SliceChecksums sums;  // of what this rank reads, where it is the canonical holder
  // Each rank opens the (complete, read-only) file on its own and reads only its slices: no
  // collective calls, so ranks holding different numbers of tensors need not keep step. (Reading
  // through a file opened by all ranks together was no faster here.)
  // A read that fails on one rank (a damaged file) is agreed on before the collective checksum
  // step, so every rank moves on to the next candidate together.
  std::string read_error;
  try {
    H5TensorFile f = H5TensorFile::open_alone((fs::path(dir) / kCheckpointFile).string());
    for (size_t t = 0; t < tensors.size(); ++t) {
      const GlobalTensor& g = tensors[t];
      const ParamInfo* mine = table.find_if_held(g.name);
      const TensorSlice s = mine ? slice_of(*mine) : TensorSlice{};
      for (int gi = 0; gi < 3; ++gi) {
        if (!mine) continue;
        f.read(kCheckpointGroups[gi] + g.name, &s, staging.data());
        if (canonical_holder(*mine, coord, owner_dp[3 * t + size_t(gi)]))
          sums.add(uint32_t(3 * t + size_t(gi)), g.shape, s, staging.data());
        if (gi == 0)
          model_.set_params(mine->offset, mine->numel, staging.data());
        else
          optim_.import_moment(gi - 1, mine->offset, mine->numel, staging.data());
      }
    }
    f.close();
  } catch (const std::exception& e) {
    read_error = e.what();
  }
  if (read_error = parallel::agree_on_error(read_error, world); !read_error.empty()) return read_error;
  // What was read must be what was saved. Until this passes, the state just installed is not
  // used: a failure makes resume() load an older checkpoint over all of it, or stop the job.
  std::string bad;
  try {
    const std::vector<uint32_t> got = sums.combine_on_rank0(bytes_of, world);
    if (rank0) {
      std::map<std::string, uint32_t> want;
      for (const auto& d : man["files"][0]["datasets"]) want[d["name"].get<std::string>()] = d["crc32c"].get<uint32_t>();
      const std::vector<std::string> names = dataset_names(model_.shape());
      for (size_t i = 0; i < names.size() && bad.empty(); ++i) {
        auto it = want.find(names[i]);
        if (it == want.end())
          bad = "manifest.json lists no dataset " + names[i];
        else if (it->second != got[i])
          bad = (fs::path(dir) / kCheckpointFile).string() + ": dataset " + names[i] + " fails its CRC-32C check (corrupted)";
      }
    }
  } catch (const std::exception& e) {
    bad = e.what();
  }
  if (bad = parallel::broadcast_string(world, bad); !bad.empty()) return bad;
  at.path = dir;
  at.steps_done = man["step"].get<int64_t>();
  // The moments' age (older checkpoints: every step taken as an update, as they counted it).
  const bool counted = man.contains("optimizer") && man["optimizer"].is_object() &&
                       man["optimizer"].contains("updates") && man["optimizer"]["updates"].is_number_integer();
  optim_.set_updates(counted ? man["optimizer"]["updates"].get<int64_t>() : at.steps_done);
  if (man.contains("recipe") && man["recipe"].is_string()) at.recipe_yaml = man["recipe"].get<std::string>();
  at.base_fingerprint = mm.value("base_fingerprint", "");
  const auto& loader = man["loader"];
  at.data.loader.next_step = loader["next_step"].get<int64_t>();
  at.data.loader.next_sample = loader.value("next_sample", int64_t(-1));
  at.data.seed_recorded = loader.contains("seed") && loader["seed"].is_number_unsigned();
  if (at.data.seed_recorded) at.data.seed = loader["seed"].get<uint64_t>();
  at.data.global_batch = loader.value("global_batch", int64_t(-1));
  at.data.samples_per_epoch = loader.value("samples_per_epoch", int64_t(-1));
  // (Absent from checkpoints of a Loom before blends: no blend then.)
  if (loader.contains("blend") && loader["blend"].is_string()) at.data.blend = loader["blend"].get<std::string>();
  // A dataset's fingerprint, PREFIX_tokens and PREFIX_crc32c; left at -1 where not recorded.
  auto fingerprint = [&](const std::string& prefix, int64_t* tokens, uint32_t* crc) {
    const std::string t = prefix + "_tokens", c = prefix + "_crc32c";
    if (loader.contains(t) && loader[t].is_number_integer() && loader.contains(c) && loader[c].is_number_unsigned()) {
      *tokens = loader[t].get<int64_t>();
      *crc = loader[c].get<uint32_t>();
    }
  };
  fingerprint("data", &at.data.data_tokens, &at.data.data_crc32c);
  fingerprint("val", &at.data.val_tokens, &at.data.val_crc32c);
  const ManifestHealth h = manifest_health(man);
  at.clean = h.clean;
  at.health.loss = h.loss;
  at.health.first_bad_step = h.first_bad_step;
  if (man.contains("loss_scale"))
    at.loss_scale = {man["loss_scale"].value("scale", 0.0), man["loss_scale"].value("good_steps", int64_t(0))};
  if (man.contains("layout") && man["layout"].is_object())
    at.layout = {man["layout"].value("tp", 0), man["layout"].value("pp", 0), man["layout"].value("dp", 0),
                 man["layout"].value("zero", 0)};
  if (man.contains("noise_scale"))
    at.noise = {man["noise_scale"].value("grad_sq", 0.0), man["noise_scale"].value("trace", 0.0),
                man["noise_scale"].value("weight", 0.0), man["noise_scale"].value("count", int64_t(0))};
  parallel::barrier_unwatched(world);  // the time below is the slowest rank's
  if (rank0) {
    const double sec = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    const double bytes = double(fs::file_size(fs::path(dir) / kCheckpointFile));
    char line[160];
    std::snprintf(line, sizeof line, " (step %lld, saved under tp=%d pp=%d dp=%d zero=%d; read and verified %.1f MB "
                  "in %.2f s, %.2f GB/s)", (long long)at.steps_done, man["layout"]["tp"].get<int>(),
                  man["layout"]["pp"].get<int>(), man["layout"]["dp"].get<int>(), man["layout"]["zero"].get<int>(),
                  bytes / 1e6, sec, bytes / 1e9 / sec);
    at.loaded_line = "resumed from " + dir + line;
  }
  return "";
}

}  // namespace loom
