#include "engine/data/shard_writer.hpp"

#include <algorithm>
#include <cstring>
#include <stdexcept>

#include "engine/data/token_shard.hpp"
#include "engine/util/crc32c.hpp"

namespace loom {

ShardWriter::ShardWriter(std::string dir, std::string split, int vocab_size, int eot_id, uint64_t max_tokens)
    : dir_(std::move(dir)),
      split_(std::move(split)),
      vocab_(vocab_size),
      eot_(eot_id),
      token_bytes_(vocab_size <= 65536 ? 2 : 4),
      max_tokens_(max_tokens) {}

ShardWriter::~ShardWriter() {
  if (f_) std::fclose(f_);
}

void ShardWriter::open_next() {
  char name[64];
  std::snprintf(name, sizeof name, "%s_%06zu.bin", split_.c_str(), shards_.size());
  const std::string path = dir_ + "/" + name;
  f_ = std::fopen(path.c_str(), "wb+");
  if (!f_) throw std::runtime_error(path + ": cannot create the shard");
  unsigned char header[kLoomShardHeader] = {};
  std::fwrite(header, 1, sizeof header, f_);  // placeholder, rewritten by close_current()
  shards_.push_back({name, 0, 0});
  in_shard_ = 0;
  max_id_ = 0;
}

void ShardWriter::flush_buffer() {
  if (!buf_.empty() && std::fwrite(buf_.data(), 1, buf_.size(), f_) != buf_.size())
    throw std::runtime_error(dir_ + "/" + shards_.back().file + ": write failed (disk full?)");
  buf_.clear();
}

void ShardWriter::close_current() {
  if (!f_) return;
  flush_buffer();
  unsigned char h[kLoomShardHeader] = {};
  const uint32_t version = 1, tb = uint32_t(token_bytes_), vocab = uint32_t(vocab_), eot = uint32_t(eot_);
  std::memcpy(h, kLoomShardMagic, 8);
  std::memcpy(h + 8, &version, 4);
  std::memcpy(h + 12, &tb, 4);
  std::memcpy(h + 16, &in_shard_, 8);
  std::memcpy(h + 24, &vocab, 4);
  std::memcpy(h + 28, &eot, 4);
  std::memcpy(h + 32, &max_id_, 4);
  std::fseek(f_, 0, SEEK_SET);
  std::fwrite(h, 1, sizeof h, f_);
  // Checksum the finished file by reading it back in blocks (bounded memory).
  std::fflush(f_);
  std::fseek(f_, 0, SEEK_SET);
  std::vector<unsigned char> block(1 << 20);
  uint32_t crc = 0;
  size_t got;
  while ((got = std::fread(block.data(), 1, block.size(), f_)) > 0) crc = crc32c(block.data(), got, crc);
  if (std::fclose(f_) != 0) throw std::runtime_error(dir_ + "/" + shards_.back().file + ": close failed");
  f_ = nullptr;
  shards_.back().tokens = in_shard_;
  shards_.back().crc32c = crc;
}

void ShardWriter::write(const uint32_t* tokens, size_t n) {
  for (size_t i = 0; i < n; ++i) {
    if (!f_ || in_shard_ == max_tokens_) {
      close_current();
      open_next();
    }
    const uint32_t t = tokens[i];
    max_id_ = std::max(max_id_, t);
    unsigned char b[4];
    std::memcpy(b, &t, 4);  // little endian: the low token_bytes_ bytes
    buf_.insert(buf_.end(), b, b + token_bytes_);
    ++in_shard_;
    ++total_;
    if (buf_.size() >= (1u << 20)) flush_buffer();
  }
}

const std::vector<ShardInfo>& ShardWriter::finish() {
  close_current();
  return shards_;
}

}  // namespace loom
