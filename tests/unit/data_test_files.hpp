#pragma once
// What the data tests (tests/unit/test_data_*.cpp) share: a fresh scratch directory, files
// written from the llm.c and Megatron layouts, every token of a dataset, an error's message.
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <functional>
#include <string>
#include <vector>

#include "engine/data/token_dataset.hpp"

namespace loom::test {

namespace fs = std::filesystem;

inline fs::path fresh_dir(const std::string& name) {
  fs::path d = fs::temp_directory_path() / "loom_test_data" / name;
  fs::remove_all(d);
  fs::create_directories(d);
  return d;
}

template <typename T>
void put(std::ofstream& f, T v) {
  f.write(reinterpret_cast<const char*>(&v), sizeof v);
}

inline std::vector<uint32_t> all_tokens(const TokenDataset& d) {
  std::vector<uint32_t> out;
  for (const auto& s : d.shards)
    for (size_t i = 0; i < s.count; ++i) out.push_back(s.at(i));
  return out;
}

// llm.c layout: int32 header[256] = {20240520, 1, n, 0...}, then n uint16 tokens.
inline void write_llmc(const fs::path& p, const std::vector<uint16_t>& toks, int32_t magic = 20240520) {
  std::ofstream f(p, std::ios::binary);
  std::vector<int32_t> h(256, 0);
  h[0] = magic;
  h[1] = 1;
  h[2] = int32_t(toks.size());
  f.write(reinterpret_cast<const char*>(h.data()), 1024);
  f.write(reinterpret_cast<const char*>(toks.data()), std::streamsize(toks.size() * 2));
}

// Megatron layout: PREFIX.idx = "MMIDIDX\0\0", u64 1, u8 dtype (8 = uint16), u64 N, u64 D+1,
// int32 lengths[N], int64 byte pointers[N], int64 document index[D+1]; PREFIX.bin = tokens.
inline void write_megatron(const fs::path& prefix, const std::vector<std::vector<uint16_t>>& seqs) {
  std::ofstream idx(prefix.string() + ".idx", std::ios::binary), bin(prefix.string() + ".bin", std::ios::binary);
  idx.write("MMIDIDX\0\0", 9);
  put<uint64_t>(idx, 1);
  put<uint8_t>(idx, 8);
  put<uint64_t>(idx, seqs.size());
  put<uint64_t>(idx, seqs.size() + 1);
  for (const auto& s : seqs) put<int32_t>(idx, int32_t(s.size()));
  int64_t ptr = 0;
  for (const auto& s : seqs) {
    put<int64_t>(idx, ptr);
    ptr += int64_t(s.size()) * 2;
  }
  for (size_t d = 0; d <= seqs.size(); ++d) put<int64_t>(idx, int64_t(d));
  for (const auto& s : seqs) bin.write(reinterpret_cast<const char*>(s.data()), std::streamsize(s.size() * 2));
}

inline std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const std::exception& e) {
    return e.what();
  }
  return "";
}

}  // namespace loom::test
