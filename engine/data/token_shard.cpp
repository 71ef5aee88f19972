#include "engine/data/token_shard.hpp"

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <stdexcept>
#include <vector>

#include "engine/util/crc32c.hpp"

namespace loom {
namespace {

// The whole-file scans (CRC, largest token) go in pieces of this many bytes, each piece's pages
// given back once read (MappedFile::drop_pages), so checking a large dataset does not leave it
// resident.
constexpr size_t kScanPiece = size_t(16) << 20;

[[noreturn]] void bad(const std::string& path, const std::string& what) { throw std::runtime_error(path + ": " + what); }

template <typename T>
T read_at(const MappedFile& f, size_t off) {
  T v;
  std::memcpy(&v, f.data() + off, sizeof(T));
  return v;
}

// The first `n` bytes of a file, for "wrong magic" messages: as quoted text when they are printable
// ASCII (NUL written \0), otherwise as hex.
std::string magic_of(const MappedFile& f, size_t n) {
  static const char* d = "0123456789abcdef";
  const size_t m = std::min(n, f.size());
  if (m == 0) return "(empty file)";
  bool text = true;
  for (size_t i = 0; i < m; ++i) text = text && (f.data()[i] == 0 || (f.data()[i] >= 0x20 && f.data()[i] < 0x7f));
  std::string s = text ? "\"" : "0x";
  for (size_t i = 0; i < m; ++i) {
    const unsigned char c = f.data()[i];
    if (!text) s += d[c >> 4], s += d[c & 15];
    else if (c == 0) s += "\\0";
    else if (c == '"' || c == '\\') s += '\\', s += char(c);
    else s += char(c);
  }
  if (text) s += '"';
  if (m < n) s += " (the file is only " + std::to_string(f.size()) + " bytes)";
  return s;
}

// a * b + c, or false if it does not fit in 64 bits.
bool checked_muladd(uint64_t a, uint64_t b, uint64_t c, uint64_t& out) {
  return !__builtin_mul_overflow(a, b, &out) && !__builtin_add_overflow(out, c, &out);
}

}  // namespace

uint32_t file_crc32c(const MappedFile& f) {
  // Pieces of 16 MiB checksummed by all threads, combined in file order.
  constexpr size_t piece = kScanPiece;
  const size_t n = f.size(), pieces = (n + piece - 1) / piece;
  if (pieces <= 1) {
    const uint32_t crc = crc32c(f.data(), n);
    f.drop_pages(0, n);
    return crc;
  }
  std::vector<uint32_t> crc(pieces);
#pragma omp parallel for schedule(dynamic, 1)
  for (size_t i = 0; i < pieces; ++i) {
    const size_t len = std::min(piece, n - i * piece);
    crc[i] = crc32c(f.data() + i * piece, len);
    f.drop_pages(i * piece, len);
  }
  uint32_t whole = crc[0];
  const Crc32cAppender append(piece);
  for (size_t i = 1; i < pieces; ++i)
    whole = i + 1 < pieces ? append(whole, crc[i]) : crc32c_combine(whole, crc[i], n - i * piece);
  return whole;
}

TokenShard::Scan TokenShard::scan() const {
  // In pieces of kScanPiece bytes, as file_crc32c: each piece's largest id and CRC, the CRCs
  // combined in order.
  const size_t per_piece = kScanPiece / size_t(token_bytes), pieces = (count + per_piece - 1) / per_piece;
  uint32_t mx = 0;
  std::vector<uint32_t> crc(pieces);
#pragma omp parallel for reduction(max : mx) schedule(dynamic, 1)
  for (size_t p = 0; p < pieces; ++p) {
    const size_t begin = p * per_piece, end = std::min(count, begin + per_piece);
    for (size_t i = begin; i < end; ++i) mx = std::max(mx, at(i));
    crc[p] = crc32c(tokens + begin * size_t(token_bytes), (end - begin) * size_t(token_bytes));
    if (file)
      file->drop_pages(size_t(tokens - file->data()) + begin * size_t(token_bytes), (end - begin) * size_t(token_bytes));
  }
  Scan s;
  s.max_token = mx;
  if (pieces == 0) return s;
  s.crc32c = crc[0];
  const Crc32cAppender append(per_piece * size_t(token_bytes));
  for (size_t p = 1; p < pieces; ++p)
    s.crc32c = p + 1 < pieces ? append(s.crc32c, crc[p])
                              : crc32c_combine(s.crc32c, crc[p], (count - p * per_piece) * size_t(token_bytes));
  return s;
}

TokenShard open_loom_shard(const std::string& path) {
  auto f = std::make_shared<MappedFile>(path);
  if (f->size() < 8 || std::memcmp(f->data(), kLoomShardMagic, 8) != 0)
    bad(path, "not a Loom token shard: magic " + magic_of(*f, 8) + ", expected \"LOOMTOKS\"");
  if (f->size() < kLoomShardHeader)
    bad(path, "truncated Loom shard: " + std::to_string(f->size()) + " bytes, the header alone needs " +
                  std::to_string(kLoomShardHeader));
  const uint32_t version = read_at<uint32_t>(*f, 8);
  if (version != 1) bad(path, "Loom shard version " + std::to_string(version) + ", this build reads version 1");
  TokenShard s;
  s.token_bytes = int(read_at<uint32_t>(*f, 12));
  s.count = read_at<uint64_t>(*f, 16);
  s.vocab_size = read_at<uint32_t>(*f, 24);
  if (s.token_bytes != 1 && s.token_bytes != 2 && s.token_bytes != 4)
    bad(path, "header says " + std::to_string(s.token_bytes) + " bytes per token, expected 1, 2 or 4");
  uint64_t expect = 0;
  if (!checked_muladd(s.count, uint64_t(s.token_bytes), kLoomShardHeader, expect))
    bad(path, "the header's token count " + std::to_string(s.count) + " is impossible for a file of " +
                  std::to_string(f->size()) + " bytes (at " + std::to_string(s.token_bytes) +
                  " bytes per token it would hold at most " +
                  std::to_string((f->size() - kLoomShardHeader) / uint64_t(s.token_bytes)) + " tokens)");
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
  if (f->size() >= 4 && read_at<int32_t>(*f, 0) == kLlmcMagic && f->size() < header)
    bad(path, "truncated llm.c shard: " + std::to_string(f->size()) + " bytes, the header alone needs " +
                  std::to_string(header));
  if (f->size() < header || read_at<int32_t>(*f, 0) != kLlmcMagic)
    bad(path, "not an llm.c token shard: first int32 is " +
                  (f->size() >= 4 ? std::to_string(read_at<int32_t>(*f, 0)) +
                                        (std::all_of(f->data(), f->data() + 4, [](unsigned char c) {
                                          return c >= 0x20 && c < 0x7f;
                                        }) ? " (" + magic_of(*f, 4) + ")" : "")
                                  : std::string("missing")) +
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
    bad(idx_path, "not a Megatron index: magic " + magic_of(idx, 9) + ", expected \"MMIDIDX\\0\\0\"");
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
  // Counts from the file: compute the size they imply without overflow (a wrapped sum could match
  // the file's size and send the reads below past its end).
  uint64_t expect_idx = 0;
  if (!checked_muladd(nseq, 12, fixed, expect_idx) || !checked_muladd(ndoc, 8, expect_idx, expect_idx))
    bad(idx_path, "the index's counts (" + std::to_string(nseq) + " sequences, " + std::to_string(ndoc) +
                      " document entries) are impossible for a file of " + std::to_string(idx.size()) + " bytes");
  if (idx.size() != expect_idx)
    bad(idx_path, "truncated or padded: " + std::to_string(idx.size()) + " bytes, " + std::to_string(nseq) +
                      " sequences and " + std::to_string(ndoc) + " document entries need " + std::to_string(expect_idx));
  // Pointers must be the running byte offsets of the sequences, as Megatron writes them.
  uint64_t total = 0, offset = 0;  // tokens, and bytes (checked against 2^63: pointers are int64)
  for (uint64_t i = 0; i < nseq; ++i) {
    const int32_t len = read_at<int32_t>(idx, fixed + 4 * i);
    const int64_t ptr = read_at<int64_t>(idx, fixed + 4 * nseq + 8 * i);
    if (len < 0 || ptr != int64_t(offset))
      bad(idx_path, "sequence " + std::to_string(i) + " has length " + std::to_string(len) + " and pointer " +
                        std::to_string(ptr) + ", expected pointer " + std::to_string(offset));
    total += uint64_t(len);
    if (!checked_muladd(total, uint64_t(bytes), 0, offset) || offset > uint64_t(INT64_MAX))
      bad(idx_path, "the sequence lengths add up to " + std::to_string(total) +
                        " tokens, impossible for a .bin file (more than 2^63 bytes)");
  }
  auto bin = std::make_shared<MappedFile>(bin_path);
  if (bin->size() != offset)
    bad(bin_path, "truncated or padded: " + std::to_string(bin->size()) + " bytes, the index's " + std::to_string(total) +
                      " tokens need " + std::to_string(offset));
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
