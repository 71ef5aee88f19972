// CRC-32C, as the data shards, checkpoints and TensorBoard use it: the standard check value,
// pieces, combining CRCs without the bytes, a large mapped file in parallel pieces.
#include <catch2/catch.hpp>

#include <algorithm>
#include <fstream>
#include <string>

#include "engine/data/mapped_file.hpp"
#include "engine/util/crc32c.hpp"
#include "data_test_files.hpp"

using namespace loom;
using namespace loom::test;

TEST_CASE("CRC-32C matches the standard check value, in one call or in pieces") {
  // crc32c("123456789") = 0xE3069283 (the Castagnoli check value); TensorBoard relies on it too.
  const std::string s = "123456789";
  CHECK(crc32c(s.data(), s.size()) == 0xE3069283u);
  std::string big(100003, '\0');
  for (size_t i = 0; i < big.size(); ++i) big[i] = char(i * 7 + 3);
  const uint32_t whole = crc32c(big.data(), big.size());
  uint32_t pieces = 0;
  for (size_t off = 0; off < big.size(); off += 4097)
    pieces = crc32c(big.data() + off, std::min<size_t>(4097, big.size() - off), pieces);
  CHECK(pieces == whole);
}

TEST_CASE("CRC-32C of pieces combines into the CRC of the whole without the bytes") {
  std::string big(300007, '\0');
  uint64_t x = 12345;
  for (auto& c : big) c = char((x = x * 6364136223846793005ull + 1442695040888963407ull) >> 56);
  const uint32_t whole = crc32c(big.data(), big.size());
  // Cuts of every kind of length: empty, one byte, odd, powers of two, most of the buffer.
  for (size_t cut : {size_t(0), size_t(1), size_t(7), size_t(4096), size_t(65536), size_t(299999), big.size()}) {
    const uint32_t a = crc32c(big.data(), cut), b = crc32c(big.data() + cut, big.size() - cut);
    CHECK(crc32c_combine(a, b, big.size() - cut) == whole);
  }
  // Equal-length pieces in order, as the checkpoint assembles a column-split tensor row by row.
  const size_t len = 1000;
  const Crc32cAppender append(len);
  uint32_t crc = crc32c(big.data(), 7);
  for (size_t off = 7; off + len <= big.size(); off += len) {
    crc = append(crc, crc32c(big.data() + off, len));
    CHECK(crc == crc32c(big.data(), off + len));
    if (off > 20000) break;
  }
  // A changed byte changes the combined value.
  std::string bad = big;
  bad[150000] ^= 1;
  CHECK(crc32c_combine(crc32c(bad.data(), 150001), crc32c(bad.data() + 150001, bad.size() - 150001),
                       bad.size() - 150001) != whole);
}

TEST_CASE("the CRC of a large mapped file, computed in parallel pieces, is the CRC of the whole") {
  auto dir = fresh_dir("crc_big");
  std::string big((size_t(33) << 20) + 5, '\0');
  uint64_t x = 7;
  for (auto& c : big) c = char((x = x * 6364136223846793005ull + 1442695040888963407ull) >> 56);
  std::ofstream(dir / "big", std::ios::binary) << big;
  MappedFile f((dir / "big").string());
  CHECK(file_crc32c(f) == crc32c(big.data(), big.size()));
}
