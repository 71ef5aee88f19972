#pragma once
// Weights made elsewhere, as Loom's global tensors. A source is opened from a path and says what
// model it holds; tensor() hands out one global tensor at a time under Loom's checkpoint names
// and shapes (engine/checkpoint/checkpoint_layout.hpp: "wte" with the real vocabulary's rows,
// weights as [out, in]), whatever the file's own naming, layout and dtype. What a rank keeps of
// it is the rank's slice (load_pretrained.hpp), exactly as a checkpoint is resharded on load.
//
// Formats, picked by open_pretrained() from what the path is:
//   a directory with config.json + model.safetensors   Hugging Face GPT-2 (hf_gpt2_source.cpp)
//   a file starting with llm.c's magic 20240326        llm.c gpt2_*.bin, v3 fp32 / v5 bf16
//   a Loom checkpoint (a directory with manifest.json  its params/ datasets (loom_ckpt_source.cpp)
//     and model.h5), or a checkpoint.dir (its newest)
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "engine/checkpoint/checkpoint_layout.hpp"
#include "engine/config/recipe.hpp"

namespace loom {

class PretrainedSource {
 public:
  virtual ~PretrainedSource() = default;
  // n_layer, n_head, d_model, vocab_size; seq_len = the positions it has embeddings for.
  const ModelConfig& model() const { return model_; }
  const std::string& path() const { return path_; }
  // "Hugging Face GPT-2", "llm.c", "Loom checkpoint": for messages.
  virtual std::string format() const = 0;
  // What identifies these exact weights, for a LoRA checkpoint to record of its frozen base and
  // check when the adapters are used again: "548105171 bytes, CRC-32C 1a2b3c4d" of the weights
  // file, whatever its name (read whole by each call; a Loom checkpoint's is its manifest's
  // figure for model.h5, no reading).
  virtual std::string fingerprint() const = 0;
  // Global tensor `want.name` in Loom's [out, in] orientation, of shape `want.shape`: wte with
  // the real vocabulary's rows; "wpe" may ask for fewer rows than the source has (a model trained
  // at a shorter context takes the first positions). Throws std::runtime_error naming the file
  // and the tensor when it is missing or of another shape.
  std::vector<float> tensor(const GlobalTensor& want) const;

 protected:
  PretrainedSource(std::string path, ModelConfig model) : path_(std::move(path)), model_(model) {}
  // The whole tensor as stored, turned to Loom's orientation: its shape in `shape`.
  virtual std::vector<float> read(const std::string& loom_name, std::vector<int64_t>& shape) const = 0;
  // How messages name the file's tensor for Loom's `loom_name` (its own name, its orientation).
  virtual std::string describe(const std::string& loom_name) const { return "tensor for Loom's " + loom_name; }
  // True where the file stores the tensor transposed against Loom's layout (an HF Conv1D
  // weight, [in, out]): a shape error then gives both shapes as the file stores them.
  virtual bool stored_transposed(const std::string& /*loom_name*/) const { return false; }

 private:
  std::string path_;
  ModelConfig model_;
};

// A fingerprint's text, "N bytes, CRC-32C XXXXXXXX"; file_fingerprint: that of a whole file's
// bytes, read.
std::string fingerprint_text(uint64_t bytes, uint32_t crc32c);
std::string file_fingerprint(const std::string& path);

// Opens `path` as one of the formats above. Throws std::runtime_error naming the path and what
// was expected when it is none of them, or when its header or config is bad. `lora_base` (the
// CLI's --base): a LoRA checkpoint's frozen base from there instead of its manifest's
// model.base (a base that moved), checked against the fingerprint recorded; refused for any
// other model.
std::unique_ptr<PretrainedSource> open_pretrained(const std::string& path, const std::string& lora_base = "");

// "" if `model` (a recipe's model section) can take `src`'s weights, else why not, naming the
// recipe key and the source's value (n_layer, n_head, d_model, vocab_size equal; seq_len at most
// the source's positions).
std::string pretrained_mismatch(const ModelConfig& model, const PretrainedSource& src);

std::unique_ptr<PretrainedSource> open_hf_gpt2(const std::string& dir);
std::unique_ptr<PretrainedSource> open_llmc(const std::string& file);
std::unique_ptr<PretrainedSource> open_loom_checkpoint(const std::string& dir, const std::string& lora_base = "");

// A LoRA checkpoint's adapters in PEFT's layout (adapter_model.safetensors + adapter_config.json
// in `out`, which must not exist or be empty), for PeftModel.from_pretrained on the base model
// (its model.base, or `lora_base`, checked as open_pretrained does).
void export_peft_adapters(const std::string& checkpoint, const std::string& out, const std::string& lora_base = "");

}  // namespace loom
