#include "engine/data/token_shard.hpp"

#include <algorithm>
#include <cstring>
#include <stdexcept>

namespace loom {
namespace {

[[noreturn]] void bad(const std::string& path, const std::string& what) { throw std::runtime_error(path + ": " + what); }

template <typename T>
T read_at(const MappedFile& f, size_t off) {
  T v;
  std::memcpy(&v, f.data() + off, sizeof(T));
  return v;
}

std::string hex_prefix(const MappedFile& f, size_t n) {
  static const char* d = "0123456789abcdef";
  std::string s;
  for (size_t i = 0; i < std::min(n, f.size()); ++i) {
    s += d[f.data()[i] >> 4];
    s += d[f.data()[i] & 15];
  }
  return s.empty() ? "(empty file)" : s;
}

}  // namespace

uint32_t TokenShard::max_token() const {
  uint32_t mx = 0;
#pragma omp parallel for reduction(max : mx) schedule(static)
  for (size_t i = 0; i < count; ++i) mx = std::max(mx, at(i));
  return mx;
}

TokenShard open_loom_shard(const std::string& path) {
  auto f = std::make_shared<MappedFile>(path);
  if (f->size() < kLoomShardHeader || std::memcmp(f->data(), kLoomShardMagic, 8) != 0)
    bad(path, "not a Loom token shard: magic " + hex_prefix(*f, 8) + ", expected \"LOOMTOKS\"");
  const uint32_t version = read_at<uint32_t>(*f, 8);
  if (version != 1) bad(path, "Loom shard version " + std::to_string(version) + ", this build reads version 1");
  TokenShard s;
  s.token_bytes = int(read_at<uint32_t>(*f, 12));
  s.count = read_at<uint64_t>(*f, 16);
  s.vocab_size = read_at<uint32_t>(*f, 24);
  if (s.token_bytes != 1 && s.token_bytes != 2 && s.token_bytes != 4)
    bad(path, "header says " + std::to_string(s.token_bytes) + " bytes per token, expected 1, 2 or 4");
  const size_t expect = kLoomShardHeader + s.count * size_t(s.token_bytes);
  if (f->size() != expect)
    bad(path, "truncated or padded: " + std::to_string(f->size()) + " bytes, the header's " + std::to_string(s.count) +
                  " tokens need " + std::to_string(expect));
  s.tokens = f->data() + kLoomShardHeader;
  s.file = std::move(f);
  s.name = path;
  return s;
}

TokenShard open_llmc_shard(const std::string& path) {
  auto f = std::make_shared<MappedFile>(path);
  constexpr size_t header = 256 * sizeof(int32_t);
  if (f->size() < header || read_at<int32_t>(*f, 0) != kLlmcMagic)
    bad(path, "not an llm.c token shard: first int32 is " +
                  (f->size() >= 4 ? std::to_string(read_at<int32_t>(*f, 0)) : std::string("missing")) +
                  ", expected 20240520");
  const int32_t version = read_at<int32_t>(*f, 4);
  if (version != 1) bad(path, "llm.c shard version " + std::to_string(version) + ", expected 1 (uint16 tokens)");
  const int32_t n = read_at<int32_t>(*f, 8);
  if (n < 0) bad(path, "negative token count " + std::to_string(n));
  const size_t expect = header + size_t(n) * 2;
  if (f->size() != expect)
    bad(path, "truncated or padded: " + std::to_string(f->size()) + " bytes, the header's " + std::to_string(n) +
                  " tokens need " + std::to_string(expect));
  TokenShard s;
  s.token_bytes = 2;
  s.count = size_t(n);
  s.tokens = f->data() + header;
  s.file = std::move(f);
  s.name = path;
  return s;
}

TokenShard open_megatron_dataset(const std::string& prefix) {
  const std::string idx_path = prefix + ".idx", bin_path = prefix + ".bin";
  MappedFile idx(idx_path);
  static const char magic[9] = {'M', 'M', 'I', 'D', 'I', 'D', 'X', 0, 0};
  constexpr size_t fixed = 9 + 8 + 1 + 8 + 8;
  if (idx.size() < fixed || std::memcmp(idx.data(), magic, 9) != 0)
    bad(idx_path, "not a Megatron index: magic " + hex_prefix(idx, 9) + ", expected \"MMIDIDX\\0\\0\"");
  const uint64_t version = read_at<uint64_t>(idx, 9);
  if (version != 1) bad(idx_path, "index version " + std::to_string(version) + ", expected 1");
  const uint8_t code = idx.data()[17];
  int bytes = 0;
  switch (code) {
    case 1: bytes = 1; break;  // uint8
    case 3: bytes = 2; break;  // int16
    case 4: bytes = 4; break;  // int32
    case 8: bytes = 2; break;  // uint16
    default: bad(idx_path, "token dtype code " + std::to_string(code) + " is not an integer type Loom reads (1, 3, 4, 8)");
  }
  const uint64_t nseq = read_at<uint64_t>(idx, 18), ndoc = read_at<uint64_t>(idx, 26);
  const size_t expect_idx = fixed + nseq * 4 + nseq * 8 + ndoc * 8;
  if (idx.size() != expect_idx)
    bad(idx_path, "truncated or padded: " + std::to_string(idx.size()) + " bytes, " + std::to_string(nseq) +
                      " sequences and " + std::to_string(ndoc) + " document entries need " + std::to_string(expect_idx));
  // Pointers must be the running byte offsets of the sequences, as Megatron writes them.
  uint64_t total = 0;
  for (uint64_t i = 0; i < nseq; ++i) {
    const int32_t len = read_at<int32_t>(idx, fixed + 4 * i);
    const int64_t ptr = read_at<int64_t>(idx, fixed + 4 * nseq + 8 * i);
    if (len < 0 || ptr != int64_t(total * bytes))
      bad(idx_path, "sequence " + std::to_string(i) + " has length " + std::to_string(len) + " and pointer " +
                        std::to_string(ptr) + ", expected pointer " + std::to_string(total * bytes));
    total += uint64_t(len);
  }
  auto bin = std::make_shared<MappedFile>(bin_path);
  if (bin->size() != total * bytes)
    bad(bin_path, "truncated or padded: " + std::to_string(bin->size()) + " bytes, the index's " + std::to_string(total) +
                      " tokens need " + std::to_string(total * bytes));
  TokenShard s;
  s.token_bytes = bytes;
  s.count = total;
  s.tokens = bin->data();
  s.file = std::move(bin);
  s.name = bin_path;
  return s;
}

TokenShard open_text_as_bytes(const std::string& path) {
  auto f = std::make_shared<MappedFile>(path);
  TokenShard s;
  s.token_bytes = 1;
  s.count = f->size();
  s.tokens = f->data();
  s.vocab_size = 256;
  s.file = std::move(f);
  s.name = path;
  return s;
}

}  // namespace loom
