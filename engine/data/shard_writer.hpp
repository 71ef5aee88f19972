#pragma once
// Writes a split as a series of Loom token shards (docs/data.md), each at most `max_tokens`
// long, streaming: memory use is one small buffer whatever the corpus size.
#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

namespace loom {

struct ShardInfo {
  std::string file;  // name within the output directory
  uint64_t tokens = 0;
  uint32_t crc32c = 0;  // of the whole file, header included
};

class ShardWriter {
 public:
  ShardWriter(std::string dir, std::string split, int vocab_size, int eot_id, uint64_t max_tokens);
  ~ShardWriter();
  void write(const uint32_t* tokens, size_t n);
  // Flushes and closes the open shard; returns every shard written.
  const std::vector<ShardInfo>& finish();
  uint64_t tokens() const { return total_; }

 private:
  void open_next();
  void close_current();
  void flush_buffer();

  std::string dir_, split_;
  int vocab_, eot_, token_bytes_;
  uint64_t max_tokens_, total_ = 0, in_shard_ = 0;
  uint32_t max_id_ = 0;
  std::FILE* f_ = nullptr;
  std::vector<unsigned char> buf_;
  std::vector<ShardInfo> shards_;
};

}  // namespace loom
