#include "engine/pretrained/hf_gpt2_export.hpp"

#include <sys/stat.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <system_error>

#include "engine/checkpoint/checkpoint_layout.hpp"
#include "engine/pretrained/hf_gpt2_names.hpp"
#include "engine/pretrained/safetensors_file.hpp"
#include "engine/util/atomic_file.hpp"

namespace loom {
namespace fs = std::filesystem;

namespace {

// GPT2Config's keys (transformers), with GPT-2's own values for what Loom does not model
// (dropout rates are only read when training in transformers).
std::string config_json(const ModelConfig& m, const std::string& dtype) {
  nlohmann::ordered_json j;
  j["architectures"] = {"GPT2LMHeadModel"};
  j["model_type"] = "gpt2";
  j["activation_function"] = "gelu_new";
  j["n_layer"] = m.n_layer;
  j["n_head"] = m.n_head;
  j["n_embd"] = m.d_model;
  j["n_positions"] = m.seq_len;
  j["n_ctx"] = m.seq_len;
  j["vocab_size"] = m.vocab_size;
  j["layer_norm_epsilon"] = 1e-5;
  j["initializer_range"] = 0.02;
  j["resid_pdrop"] = 0.1;
  j["embd_pdrop"] = 0.1;
  j["attn_pdrop"] = 0.1;
  // Both of Loom's tokenizers put end-of-text last (GPT-2: 50256; bytes: 256).
  j["bos_token_id"] = m.vocab_size - 1;
  j["eos_token_id"] = m.vocab_size - 1;
  j["tie_word_embeddings"] = true;
  j["torch_dtype"] = dtype == "BF16" ? "bfloat16" : "float32";
  return j.dump(2) + "\n";
}

void copy_file(const std::string& from, const fs::path& to, const char* what) {
  std::error_code ec;
  if (!fs::is_regular_file(from, ec)) throw std::runtime_error(from + ": " + what + " is not a readable file");
  fs::copy_file(from, to, ec);
  if (ec) throw std::runtime_error("copying " + from + " to " + to.string() + ": " + ec.message());
}

}  // namespace

void export_hf_gpt2(const PretrainedSource& src, const std::string& out, const HfExportOptions& opt) {
  if (opt.dtype != "F32" && opt.dtype != "BF16")
    throw std::runtime_error("export dtype " + opt.dtype + ": expected F32 or BF16");
  std::error_code ec;
  if (fs::exists(out, ec) && !(fs::is_directory(out, ec) && fs::is_empty(out, ec)))
    throw std::runtime_error(out + ": already exists and is not an empty directory; Loom never writes over a model "
                             "(choose another --out or remove it)");
  const fs::path target = fs::absolute(out);
  fs::create_directories(target.parent_path(), ec);
  std::string tmpl = target.string() + ".partial-XXXXXX";
  if (!mkdtemp(tmpl.data())) throw std::runtime_error(tmpl + ": cannot create (" + std::strerror(errno) + ")");
  const fs::path work = tmpl;
  try {
    const ModelConfig& m = src.model();
    const GptShape shape = GptShape::make(m.n_layer, m.n_head, m.d_model, m.vocab_size, m.seq_len);
    // Every tensor in Loom's order, in HF's name and orientation. Held in memory together: the
    // writer lays them out in one pass (a 124M model: 0.5 GB in fp32).
    std::vector<std::vector<float>> data;
    std::vector<SafetensorsTensor> tensors;
    for (const GlobalTensor& g : global_tensors(shape)) {
      const HfTensorName hf = hf_gpt2_name(g.name);
      std::vector<float> t = src.tensor(g);
      std::vector<int64_t> dims = g.shape;
      if (hf.transposed) {
        const int64_t rows = dims[0], cols = dims[1];  // [out, in] -> [in, out]
        std::vector<float> tr(t.size());
#pragma omp parallel for schedule(static)
        for (int64_t c = 0; c < cols; ++c)
          for (int64_t r = 0; r < rows; ++r) tr[size_t(c * rows + r)] = t[size_t(r * cols + c)];
        t.swap(tr);
        dims = {cols, rows};
      }
      data.push_back(std::move(t));
      tensors.push_back({"transformer." + hf.name, dims, nullptr, opt.dtype});
    }
    for (size_t i = 0; i < tensors.size(); ++i) tensors[i].data = data[i].data();
    write_safetensors((work / "model.safetensors").string(), tensors, {{"format", "pt"}});
    write_file_atomically((work / "config.json").string(), config_json(m, opt.dtype));
    if (!opt.vocab.empty()) copy_file(opt.vocab, work / "vocab.json", "the GPT-2 vocabulary");
    if (!opt.merges.empty()) copy_file(opt.merges, work / "merges.txt", "the GPT-2 merges");
    if (fs::exists(target, ec)) fs::remove(target, ec);  // the empty directory checked above
    // mkdtemp made it 0700: give it the permissions a new directory gets (umask).
    const mode_t mask = ::umask(0);
    ::umask(mask);
    fs::permissions(work, fs::perms(0777 & ~mask), ec);
    fs::rename(work, target, ec);
    if (ec) throw std::runtime_error("renaming " + work.string() + " to " + target.string() + ": " + ec.message());
  } catch (...) {
    fs::remove_all(work, ec);
    throw;
  }
}

}  // namespace loom
