// A Loom checkpoint as a source of weights (the params/ datasets of its model.h5; the Adam
// moments and the data position are not used): `model.init_from` a checkpoint starts a new run
// from its weights, `loom export` writes them in Hugging Face's format. The checkpoint is
// verified (every file's size and CRC-32C) before a byte of it is used.
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>
#include <stdexcept>

#include "engine/checkpoint/checkpoint_verify.hpp"
#include "engine/checkpoint/h5_tensor_file.hpp"
#include "engine/checkpoint/lora_manifest.hpp"
#include "engine/pretrained/pretrained_source.hpp"
#include "engine/pretrained/safetensors_file.hpp"
#include "engine/util/atomic_file.hpp"

namespace loom {
namespace fs = std::filesystem;
namespace {

nlohmann::json read_manifest(const std::string& dir) {
  const fs::path p = fs::path(dir) / "manifest.json";
  try {
    return nlohmann::json::parse(std::ifstream(p));
  } catch (const std::exception& e) {
    throw std::runtime_error(p.string() + ": not readable JSON (" + e.what() + ")");
  }
}

ModelConfig manifest_model(const std::string& dir, const nlohmann::json& man) {
  try {
    const nlohmann::json& m = man.at("model");
    return ModelConfig{m.at("n_layer").get<int>(), m.at("n_head").get<int>(), m.at("d_model").get<int>(),
                       m.at("vocab_size").get<int>(), m.at("seq_len").get<int>(), ""};
  } catch (const std::exception& e) {
    throw std::runtime_error(dir + "/manifest.json: no readable model section (" + e.what() + ")");
  }
}

// A LoRA checkpoint holds the adapters (and what else trained), not the frozen base: that comes
// from the base model the run adapted (the manifest's model.base), and each adapted weight is
// merged, W + (alpha / rank) B A, as it is read.
// `given` (--base): the base from there instead, a base that moved since the run.
std::unique_ptr<PretrainedSource> open_lora_base(const std::string& dir, const nlohmann::json& man,
                                                 const std::string& given) {
  const std::string recorded_at = man["model"].value("base", "");
  if (recorded_at.empty())
    throw std::runtime_error(dir + ": a LoRA checkpoint of a run without model.init_from (its frozen base was the "
                             "random init of train.seed): there is no base model to merge the adapters into");
  const std::string base = given.empty() ? recorded_at : given;
  const std::string named = given.empty() ? "model.base " + base : "--base " + base;
  std::unique_ptr<PretrainedSource> src;
  try {
    src = open_pretrained(base);
  } catch (const std::exception& e) {
    throw std::runtime_error(dir + ": its frozen base cannot be opened (" + e.what() + ")" +
                             (given.empty() ? "; if it moved, loom eval, sample and export take its new place with "
                                              "--base PATH (checked against the fingerprint the checkpoint recorded)"
                                            : ""));
  }
  // The base the adapters were trained on, or refused: other weights under the same path (a
  // checkpoint.dir that trained on, a file replaced) or at another would take the adapters silently.
  const std::string recorded = man["model"].value("base_fingerprint", "");
  if (!recorded.empty()) {
    if (const std::string now = src->fingerprint(); now != recorded)
      throw std::runtime_error(dir + ": its frozen base, " + named + ", holds other weights than the adapters were "
                               "trained on (" + recorded + " then, " + now + " now): " +
                               (given.empty() ? "restore that base (or give where it is now with --base)"
                                              : "give the base the run had (model.base " + recorded_at + ")") +
                               ", or use a checkpoint of a run on this one");
  } else if (!given.empty()) {
    std::fprintf(stderr, "loom: warning: %s records no fingerprint of its base (saved before Loom recorded one): "
                 "--base %s is used unchecked\n", dir.c_str(), given.c_str());
  }
  return src;
}

ModelConfig source_model(const std::string& dir, const nlohmann::json& man, const PretrainedSource* base) {
  ModelConfig m = manifest_model(dir, man);
  // A frozen position table: the base's positions (a fine-tuning at a shorter context keeps them).
  if (base && !lora_from_manifest_model(man["model"]).train_embeddings) m.seq_len = base->model().seq_len;
  return m;
}

class LoomCheckpointSource final : public PretrainedSource {
 public:
  LoomCheckpointSource(const std::string& dir, const nlohmann::json& man, std::unique_ptr<PretrainedSource> base)
      : PretrainedSource(dir, source_model(dir, man, base.get())),
        file_(H5TensorFile::open_alone((fs::path(dir) / kCheckpointFile).string())),
        base_(std::move(base)),
        lora_(lora_from_manifest_model(man["model"])) {
    const nlohmann::json& file = man.at("files").at(0);
    fingerprint_ = fingerprint_text(file.at("bytes").get<uint64_t>(), file.at("crc32c").get<uint32_t>());
    for (const auto& d : man.at("files").at(0).at("datasets")) {
      const std::string name = d.at("name").get<std::string>();
      if (name.rfind(kCheckpointGroups[0], 0) == 0) held_.insert(name.substr(std::string(kCheckpointGroups[0]).size()));
    }
  }
  std::string format() const override { return "Loom checkpoint"; }
  std::string fingerprint() const override { return fingerprint_; }
  // The checkpoint's own tensor (adapters included), as saved.
  std::vector<float> own(const std::string& name, std::vector<int64_t>& shape) const {
    const std::string ds = std::string(kCheckpointGroups[0]) + name;
    if (!held_.count(name)) throw std::runtime_error(path() + ": no dataset " + ds);
    shape = file_.shape_of(ds);
    size_t n = 1;
    for (int64_t d : shape) n *= size_t(d);
    std::vector<float> out(n);
    TensorSlice all{{{0, shape.empty() ? 1 : shape[0]}}, 0, shape.size() > 1 ? shape[1] : 1};
    file_.read(ds, &all, out.data());
    return out;
  }

 protected:
  std::vector<float> read(const std::string& name, std::vector<int64_t>& shape) const override {
    if (held_.count(name) || !base_) return own(name, shape);
    // A frozen base tensor, with its adapters merged in if it has any.
    std::vector<float> w = base_->tensor(GlobalTensor{name, base_shape(name)});
    shape = base_shape(name);
    const std::string stem = name.size() > 7 ? name.substr(0, name.size() - 7) : "";  // "h.0.attn.qkv" of ".weight"
    if (name.size() > 7 && name.compare(name.size() - 7, 7, ".weight") == 0 && held_.count(stem + ".lora_a")) {
      std::vector<int64_t> sa, sb;
      const std::vector<float> A = own(stem + ".lora_a", sa), B = own(stem + ".lora_b", sb);
      const int64_t out = sb[0], r = sb[1], in = sa[1];
      const float scale = float(lora_.scale());
#pragma omp parallel for schedule(static)
      for (int64_t o = 0; o < out; ++o)
        for (int64_t k = 0; k < r; ++k) {
          const float b = scale * B[size_t(o * r + k)];
          for (int64_t i = 0; i < in; ++i) w[size_t(o * in + i)] += b * A[size_t(k * in + i)];
        }
    }
    return w;
  }

 private:
  // The global shape of base tensor `name` of this model (wte: the real vocabulary's rows).
  std::vector<int64_t> base_shape(const std::string& name) const {
    const ModelConfig& m = model();
    for (const GlobalTensor& g : global_tensors(GptShape::make(m.n_layer, m.n_head, m.d_model, m.vocab_size, m.seq_len)))
      if (g.name == name) return g.shape;
    throw std::runtime_error(path() + ": Loom's GPT has no tensor " + name);
  }

  mutable H5TensorFile file_;  // reads move HDF5's own state, not the tensors
  std::unique_ptr<PretrainedSource> base_;  // LoRA: the frozen base
  LoraSpec lora_;
  std::set<std::string> held_;  // the checkpoint's tensors
  std::string fingerprint_;     // the manifest's account of model.h5
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

std::unique_ptr<PretrainedSource> open_loom_checkpoint(const std::string& path, const std::string& lora_base) {
  const std::string dir = resolve_checkpoint(path);
  if (std::string bad = verify_checkpoint(dir); !bad.empty())
    throw std::runtime_error(dir + ": the checkpoint does not verify: " + bad);
  const nlohmann::json man = read_manifest(dir);
  std::unique_ptr<PretrainedSource> base;
  if (lora_from_manifest_model(man.at("model")).on())
    base = open_lora_base(dir, man, lora_base);
  else if (!lora_base.empty())
    throw std::runtime_error("--base " + lora_base + ": only a LoRA checkpoint has a frozen base to give; " + dir +
                             " holds the whole model");
  return std::make_unique<LoomCheckpointSource>(dir, man, std::move(base));
}

void export_peft_adapters(const std::string& path, const std::string& out, const std::string& lora_base) {
  const std::string dir = resolve_checkpoint(path);
  if (std::string bad = verify_checkpoint(dir); !bad.empty())
    throw std::runtime_error(dir + ": the checkpoint does not verify: " + bad);
  const nlohmann::json man = read_manifest(dir);
  const LoraSpec lora = lora_from_manifest_model(man.at("model"));
  if (!lora.on()) throw std::runtime_error(dir + ": not a LoRA checkpoint (no adapters to export)");
  if (lora.train_embeddings || lora.train_layernorm)
    throw std::runtime_error(dir + ": the run also trained its " +
                             std::string(lora.train_embeddings ? "embeddings" : "LayerNorms") +
                             ", which an adapter-only (PEFT) export cannot carry: export the merged model instead");
  std::error_code ec;
  if (fs::exists(out, ec) && !(fs::is_directory(out, ec) && fs::is_empty(out, ec)))
    throw std::runtime_error(out + ": already exists and is not an empty directory; Loom never writes over a model");
  // A base given with --base is checked (the adapters' config names it); the recorded one is not
  // needed to write the adapters.
  if (!lora_base.empty()) open_lora_base(dir, man, lora_base);
  const LoomCheckpointSource src(dir, man, nullptr);
  // PEFT's names for GPT-2 (Conv1D layers, fan_in_fan_out): lora_A.weight [r, in], lora_B.weight
  // [out, r] beside each adapted module, under "base_model.model.".
  std::vector<std::vector<float>> data;
  std::vector<SafetensorsTensor> tensors;
  nlohmann::json modules = nlohmann::json::array();
  const std::pair<const char*, const char*> targets[] = {
      {"attn.qkv", "attn.c_attn"}, {"attn.proj", "attn.c_proj"}, {"mlp.fc", "mlp.c_fc"}, {"mlp.proj", "mlp.c_proj"}};
  const bool on[] = {lora.qkv, lora.attn_proj, lora.fc, lora.mlp_proj};
  for (int t = 0; t < 4; ++t)
    if (on[t]) modules.push_back(targets[t].second);
  for (int l = 0; l < src.model().n_layer; ++l)
    for (int t = 0; t < 4; ++t) {
      if (!on[t]) continue;
      const std::string ours = "h." + std::to_string(l) + "." + targets[t].first;
      const std::string theirs = "base_model.model.transformer.h." + std::to_string(l) + "." + targets[t].second;
      for (const char* ab : {"a", "b"}) {
        std::vector<int64_t> shape;
        data.push_back(src.own(ours + ".lora_" + ab, shape));
        tensors.push_back({theirs + (ab[0] == 'a' ? ".lora_A.weight" : ".lora_B.weight"), shape, nullptr, "F32"});
      }
    }
  for (size_t i = 0; i < tensors.size(); ++i) tensors[i].data = data[i].data();
  nlohmann::ordered_json cfg;
  cfg["peft_type"] = "LORA";
  cfg["task_type"] = "CAUSAL_LM";
  cfg["base_model_name_or_path"] = lora_base.empty() ? man["model"].value("base", "") : fs::absolute(lora_base).lexically_normal().string();
  cfg["r"] = lora.rank;
  cfg["lora_alpha"] = lora.alpha;
  cfg["lora_dropout"] = 0.0;
  cfg["target_modules"] = modules;
  cfg["fan_in_fan_out"] = true;
  cfg["bias"] = "none";
  cfg["inference_mode"] = true;
  fs::create_directories(out);
  write_safetensors((fs::path(out) / "adapter_model.safetensors").string(), tensors, {{"format", "pt"}});
  write_file_atomically((fs::path(out) / "adapter_config.json").string(), cfg.dump(2) + "\n");
}

}  // namespace loom
