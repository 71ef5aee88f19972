#pragma once
// Byte-level training data: a text file read as one token per byte (vocab 256). Samples are
// windows of T+1 bytes at pseudo-random offsets that depend only on (seed, step, sample index
// within the global batch), so the sequence of global batches is the same whatever the
// micro-batch split. (The sharded, epoch-exact loader of the data issue supersedes this.)
#include <cstdint>
#include <string>
#include <vector>

namespace loom {

class ByteCorpus {
 public:
  // Throws std::runtime_error naming `path` and `key` (e.g. "data.train") if the file is missing,
  // unreadable or shorter than one sample.
  ByteCorpus(const std::string& path, const std::string& key, int seq_len);
  size_t size() const { return bytes_.size(); }

  // Fills tokens/targets (count, T) with samples [first, first+count) of global batch `step`.
  void sample(uint64_t seed, int64_t step, int first, int count, int32_t* tokens, int32_t* targets) const;

 private:
  std::vector<uint8_t> bytes_;
  int T_;
};

}  // namespace loom
