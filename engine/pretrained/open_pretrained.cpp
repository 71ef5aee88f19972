// open_pretrained(): which format a path is (pretrained_source.hpp).
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <stdexcept>

#include "engine/pretrained/pretrained_source.hpp"

namespace loom {
namespace fs = std::filesystem;

std::unique_ptr<PretrainedSource> open_pretrained(const std::string& path, const std::string& lora_base) {
  std::error_code ec;
  const bool hf = fs::is_directory(path, ec) &&
                  (fs::exists(fs::path(path) / "config.json") || fs::exists(fs::path(path) / "model.safetensors"));
  if (fs::is_directory(path, ec) && !hf)
    return open_loom_checkpoint(path, lora_base);  // a checkpoint, or a checkpoint.dir: it says what is missing
  if (!hf && !fs::exists(path, ec))
    throw std::runtime_error(path + ": no such file or directory (expected a Hugging Face GPT-2 directory, an llm.c "
                             ".bin checkpoint or a Loom checkpoint)");
  if (!lora_base.empty())
    throw std::runtime_error("--base " + lora_base + ": only a LoRA checkpoint has a frozen base to give; " + path +
                             " is " + (hf ? "a Hugging Face model" : "a file, not a Loom checkpoint"));
  if (hf) return open_hf_gpt2(path);
  std::ifstream in(path, std::ios::binary);
  int32_t magic = 0;
  if (!in.read(reinterpret_cast<char*>(&magic), sizeof magic) || magic != 20240326)
    throw std::runtime_error(path + ": not a model Loom can read: a file must be an llm.c checkpoint (starting with "
                             "the magic number 20240326); a Hugging Face model is a directory with config.json and "
                             "model.safetensors");
  return open_llmc(path);
}

}  // namespace loom
