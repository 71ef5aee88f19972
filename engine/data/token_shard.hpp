#pragma once
// A shard of tokens, whatever file format it came from: a memory-mapped run of 1-, 2- or
// 4-byte unsigned token ids. Opening a shard checks its format (magic, header, size) and every
// token against the vocabulary, and throws std::runtime_error naming the file on any problem.
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "engine/data/mapped_file.hpp"

namespace loom {

struct TokenShard {
  std::shared_ptr<MappedFile> file;
  const unsigned char* tokens = nullptr;  // into file
  size_t count = 0;
  int token_bytes = 2;                    // 1, 2 or 4
  uint32_t vocab_size = 0;                // as the file declares it, 0 if the format has none
  std::string name;                       // for messages

  uint32_t at(size_t i) const {
    switch (token_bytes) {
      case 1: return tokens[i];
      case 2: {
        uint16_t v;
        std::memcpy(&v, tokens + 2 * i, 2);
        return v;
      }
      default: {
        uint32_t v;
        std::memcpy(&v, tokens + 4 * i, 4);
        return v;
      }
    }
  }
  // One parallel pass over the tokens: the largest id, and the CRC-32C of the tokens' bytes as
  // stored (token_bytes each, little-endian): what a checkpoint records of its training data.
  struct Scan {
    uint32_t max_token = 0;
    uint32_t crc32c = 0;
  };
  Scan scan() const;
  uint32_t max_token() const { return scan().max_token; }
};

// CRC-32C of a whole mapped file (pieces checksummed in parallel, then combined).
uint32_t file_crc32c(const MappedFile& f);

// Loom's own shard (docs/data.md): 64-byte header "LOOMTOKS", version, token bytes, count,
// vocab size, eot id, max token id; then the tokens.
constexpr char kLoomShardMagic[8] = {'L', 'O', 'O', 'M', 'T', 'O', 'K', 'S'};
constexpr size_t kLoomShardHeader = 64;
TokenShard open_loom_shard(const std::string& path);
// llm.c: 256 int32 header ([0] = 20240520, [1] = 1, [2] = token count), then uint16 tokens.
constexpr int32_t kLlmcMagic = 20240520;
TokenShard open_llmc_shard(const std::string& path);
// Megatron indexed dataset PREFIX.idx + PREFIX.bin (the whole .bin as one token stream).
TokenShard open_megatron_dataset(const std::string& prefix);
// Raw bytes of any file, one token per byte.
TokenShard open_text_as_bytes(const std::string& path);

}  // namespace loom
