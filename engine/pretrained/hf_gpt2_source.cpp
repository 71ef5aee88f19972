// A Hugging Face GPT-2 directory: config.json (hf_gpt2_config.hpp) and model.safetensors.
#include <algorithm>
#include <cstring>
#include <filesystem>
#include <stdexcept>

#include "engine/pretrained/hf_gpt2_config.hpp"
#include "engine/pretrained/hf_gpt2_names.hpp"
#include "engine/pretrained/pretrained_source.hpp"
#include "engine/pretrained/safetensors_file.hpp"

namespace loom {
namespace {

class HfGpt2Source final : public PretrainedSource {
 public:
  HfGpt2Source(const std::string& dir, const HfGpt2Config& cfg)
      : PretrainedSource(dir, cfg.model), file_(weights_path(dir)) {
    // GPT2LMHeadModel saves "transformer.wte.weight", GPT2Model "wte.weight".
    prefix_ = file_.find("transformer.wte.weight") ? "transformer." : "";
  }
  std::string format() const override { return "Hugging Face GPT-2"; }
  std::string fingerprint() const override { return file_fingerprint(file_.path()); }
  std::string describe(const std::string& loom_name) const override {
    const HfTensorName hf = hf_gpt2_name(loom_name);
    return "tensor '" + prefix_ + hf.name + "' (Loom's " + loom_name + ")" +
           (hf.transposed ? ", a Conv1D weight stored [in, out] and read transposed," : "");
  }
  bool stored_transposed(const std::string& loom_name) const override { return hf_gpt2_name(loom_name).transposed; }

 protected:
  std::vector<float> read(const std::string& loom_name, std::vector<int64_t>& shape) const override {
    const HfTensorName hf = hf_gpt2_name(loom_name);
    const std::string name = prefix_ + hf.name;
    const SafetensorsEntry* e = file_.find(name);
    if (!e)
      throw std::runtime_error(file_.path() + ": no tensor '" + name + "' (Loom's " + loom_name +
                               "); a GPT-2 of " + std::to_string(model().n_layer) + " layers (config.json) has it");
    shape = e->shape;
    if (!hf.transposed) {
      std::vector<float> data = file_.read_f32(name);
      if (loom_name == "wte") check_tied_head(data);
      return data;
    }
    if (shape.size() != 2)
      throw std::runtime_error(file_.path() + ": tensor '" + name + "' has " + std::to_string(shape.size()) +
                               " dimensions, expected a 2-D Conv1D weight [in, out]");
    // Read a piece of stored rows at a time and transposed into place, so that only the result
    // and one piece are ever held (`loom plan` counts one fp32 copy of the tensor being read).
    const int64_t in = shape[0], out = shape[1];
    std::vector<float> t(size_t(in * out)), rows;
    const int64_t per = std::max<int64_t>(1, int64_t(SafetensorsFile::kReadPiece) / std::max<int64_t>(out, 1));
    for (int64_t i0 = 0; i0 < in; i0 += per) {
      const int64_t n = std::min(per, in - i0);
      rows.resize(size_t(n * out));
      file_.read_f32_range(name, size_t(i0 * out), rows.size(), rows.data());
#pragma omp parallel for schedule(static)
      for (int64_t o = 0; o < out; ++o)
        for (int64_t i = 0; i < n; ++i) t[size_t(o * in + i0 + i)] = rows[size_t(i * out + o)];
    }
    shape = {out, in};
    return t;
  }

 private:
  static std::string weights_path(const std::string& dir) {
    const std::string p = (std::filesystem::path(dir) / "model.safetensors").string();
    if (!std::filesystem::exists(p))
      throw std::runtime_error(p + ": missing (Loom reads a Hugging Face model's weights from model.safetensors; "
                               "convert a pytorch_model.bin with safetensors' convert script first)");
    return p;
  }
  // Loom's LM head is the token embedding: a separate lm_head.weight must be that same matrix.
  void check_tied_head(const std::vector<float>& wte) const {
    const SafetensorsEntry* head = file_.find("lm_head.weight");
    if (!head) return;
    // Compared a piece at a time: no second whole copy of the embedding next to wte's.
    bool same = size_t(head->elements()) == wte.size();
    std::vector<float> piece;
    for (size_t first = 0; same && first < wte.size(); first += SafetensorsFile::kReadPiece) {
      piece.resize(std::min(SafetensorsFile::kReadPiece, wte.size() - first));
      file_.read_f32_range("lm_head.weight", first, piece.size(), piece.data());
      same = std::memcmp(piece.data(), wte.data() + first, piece.size() * sizeof(float)) == 0;
    }
    if (!same)
      throw std::runtime_error(file_.path() + ": lm_head.weight differs from " + prefix_ +
                               "wte.weight; Loom's GPT ties the LM head to the token embedding, as GPT-2 does");
  }

  SafetensorsFile file_;
  std::string prefix_;
};

}  // namespace

std::unique_ptr<PretrainedSource> open_hf_gpt2(const std::string& dir) {
  return std::make_unique<HfGpt2Source>(dir, read_hf_gpt2_config(dir));
}

}  // namespace loom
