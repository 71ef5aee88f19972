// A Loom checkpoint as a source of weights (the params/ datasets of its model.h5; the Adam
// moments and the data position are not used): `model.init_from` a checkpoint starts a new run
// from its weights, `loom export` writes them in Hugging Face's format. The checkpoint is
// verified (every file's size and CRC-32C) before a byte of it is used.
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <stdexcept>

#include "engine/checkpoint/checkpoint_verify.hpp"
#include "engine/checkpoint/h5_tensor_file.hpp"
#include "engine/pretrained/pretrained_source.hpp"

namespace loom {
namespace fs = std::filesystem;
namespace {

ModelConfig manifest_model(const std::string& dir) {
  const fs::path p = fs::path(dir) / "manifest.json";
  try {
    const nlohmann::json m = nlohmann::json::parse(std::ifstream(p))["model"];
    return ModelConfig{m.at("n_layer").get<int>(), m.at("n_head").get<int>(), m.at("d_model").get<int>(),
                       m.at("vocab_size").get<int>(), m.at("seq_len").get<int>(), ""};
  } catch (const std::exception& e) {
    throw std::runtime_error(p.string() + ": no readable model section (" + e.what() + ")");
  }
}

class LoomCheckpointSource final : public PretrainedSource {
 public:
  explicit LoomCheckpointSource(const std::string& dir)
      : PretrainedSource(dir, manifest_model(dir)), file_(H5TensorFile::open_alone((fs::path(dir) / kCheckpointFile).string())) {}
  std::string format() const override { return "Loom checkpoint"; }

 protected:
  std::vector<float> read(const std::string& name, std::vector<int64_t>& shape) const override {
    const std::string ds = std::string(kCheckpointGroups[0]) + name;
    try {
      shape = file_.shape_of(ds);
    } catch (const std::exception& e) {
      throw std::runtime_error(path() + ": no dataset " + ds + " (" + e.what() + ")");
    }
    size_t n = 1;
    for (int64_t d : shape) n *= size_t(d);
    std::vector<float> out(n);
    TensorSlice all{{{0, shape.empty() ? 1 : shape[0]}}, 0, shape.size() > 1 ? shape[1] : 1};
    file_.read(ds, &all, out.data());
    return out;
  }

 private:
  mutable H5TensorFile file_;  // reads move HDF5's own state, not the tensors
};

// The checkpoint `path` names: itself, or the newest complete one of a checkpoint.dir.
std::string resolve_checkpoint(const std::string& path) {
  if (fs::exists(fs::path(path) / "manifest.json")) return path;
  const std::vector<std::string> all = list_checkpoints(path);
  if (all.empty())
    throw std::runtime_error(path + ": not a model Loom can read: a directory must be a Hugging Face GPT-2 model "
                             "(config.json + model.safetensors), a Loom checkpoint (manifest.json + model.h5) or a "
                             "checkpoint.dir holding complete ones");
  return all.back();
}

}  // namespace

std::unique_ptr<PretrainedSource> open_loom_checkpoint(const std::string& path) {
  const std::string dir = resolve_checkpoint(path);
  if (std::string bad = verify_checkpoint(dir); !bad.empty())
    throw std::runtime_error(dir + ": the checkpoint does not verify: " + bad);
  return std::make_unique<LoomCheckpointSource>(dir);
}

}  // namespace loom
