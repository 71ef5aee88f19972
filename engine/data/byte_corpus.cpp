#include "engine/data/byte_corpus.hpp"

#include <fstream>
#include <stdexcept>

namespace loom {
namespace {
uint64_t mix(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}
}  // namespace

ByteCorpus::ByteCorpus(const std::string& path, const std::string& key, int seq_len) : T_(seq_len) {
  if (path.empty()) throw std::runtime_error(key + ": no data file given (set " + key + " in the recipe)");
  std::ifstream f(path, std::ios::binary);
  if (!f) throw std::runtime_error(key + "=" + path + ": cannot open the data file");
  bytes_.assign(std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>());
  if (bytes_.size() < size_t(seq_len) + 1)
    throw std::runtime_error(key + "=" + path + ": " + std::to_string(bytes_.size()) +
                             " bytes, shorter than one sample of seq_len+1 = " + std::to_string(seq_len + 1) +
                             " tokens");
}

void ByteCorpus::sample(uint64_t seed, int64_t step, int first, int count, int32_t* tokens, int32_t* targets) const {
  const uint64_t windows = bytes_.size() - T_;  // valid start offsets
  for (int i = 0; i < count; ++i) {
    const uint64_t h = mix(mix(seed ^ 0x5eedda7aull) ^ mix(uint64_t(step) * 0x100000001b3ull + uint64_t(first + i)));
    const size_t off = h % windows;
    for (int t = 0; t < T_; ++t) {
      tokens[size_t(i) * T_ + t] = bytes_[off + t];
      targets[size_t(i) * T_ + t] = bytes_[off + t + 1];
    }
  }
}

}  // namespace loom
