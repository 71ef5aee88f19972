#include "engine/pretrained/pretrained_source.hpp"

#include <cstdio>
#include <stdexcept>

#include "engine/data/mapped_file.hpp"
#include "engine/data/token_shard.hpp"

namespace loom {

std::string fingerprint_text(uint64_t bytes, uint32_t crc32c) {
  char b[64];
  std::snprintf(b, sizeof b, "%llu bytes, CRC-32C %08x", (unsigned long long)bytes, crc32c);
  return b;
}

std::string file_fingerprint(const std::string& path) {
  const MappedFile f(path);  // token_shard.hpp's checksum: all threads, pages given back as read
  return fingerprint_text(f.size(), file_crc32c(f));
}

namespace {
std::string shape_str(const std::vector<int64_t>& s) {
  std::string out = "[";
  for (size_t i = 0; i < s.size(); ++i) out += (i ? ", " : "") + std::to_string(s[i]);
  return out + "]";
}
}  // namespace

std::vector<float> PretrainedSource::tensor(const GlobalTensor& want) const {
  std::vector<int64_t> shape;
  std::vector<float> data = read(want.name, shape);
  if (shape == want.shape) return data;
  // A shorter context than the source's: the first positions' embeddings.
  if (want.name == "wpe" && shape.size() == 2 && want.shape.size() == 2 && shape[1] == want.shape[1] &&
      shape[0] >= want.shape[0]) {
    data.resize(size_t(want.shape[0] * want.shape[1]));
    return data;
  }
  if (stored_transposed(want.name) && shape.size() == 2 && want.shape.size() == 2)
    throw std::runtime_error(path_ + ": " + format() + " " + describe(want.name) + " is stored as " +
                             shape_str({shape[1], shape[0]}) + ", the model needs it stored as " +
                             shape_str({want.shape[1], want.shape[0]}));
  throw std::runtime_error(path_ + ": " + format() + " " + describe(want.name) + " has shape " +
                           shape_str(shape) + ", the model needs " + shape_str(want.shape));
}

std::string pretrained_mismatch(const ModelConfig& m, const PretrainedSource& src) {
  const ModelConfig& s = src.model();
  auto differs = [&](const char* key, int mine, int theirs) {
    return "the recipe's model." + std::string(key) + " is " + std::to_string(mine) + " but " + src.path() + " (" +
           src.format() + ") has " + std::to_string(theirs);
  };
  if (m.n_layer != s.n_layer) return differs("n_layer", m.n_layer, s.n_layer);
  if (m.n_head != s.n_head) return differs("n_head", m.n_head, s.n_head);
  if (m.d_model != s.d_model) return differs("d_model", m.d_model, s.d_model);
  if (m.vocab_size != s.vocab_size) return differs("vocab_size", m.vocab_size, s.vocab_size);
  if (m.seq_len > s.seq_len)
    return "the recipe's model.seq_len is " + std::to_string(m.seq_len) + " but " + src.path() + " (" + src.format() +
           ") has position embeddings for " + std::to_string(s.seq_len) + " positions only";
  return "";
}

}  // namespace loom
