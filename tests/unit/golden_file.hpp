#pragma once
// Reader for the golden files written by scripts/golden_file.py (format version 1):
//   "LOOMGLD1", u32 version, u32 count, then per entry: u32 name_len, name, u32 dtype
//   (0 f32, 1 i32), u32 ndim, i64 dims[ndim], row-major data. Little endian.
#include <cstdint>
#include <cstring>
#include <fstream>
#include <map>
#include <stdexcept>
#include <string>
#include <vector>

namespace loom::test {

struct GoldenEntry {
  uint32_t dtype = 0;
  std::vector<int64_t> dims;
  std::vector<float> f32;
  std::vector<int32_t> i32;
};

inline std::map<std::string, GoldenEntry> read_golden(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) throw std::runtime_error(path + ": cannot open golden file");
  auto rd = [&](void* p, size_t n) {
    if (!f.read(static_cast<char*>(p), std::streamsize(n))) throw std::runtime_error(path + ": truncated");
  };
  char magic[8];
  rd(magic, 8);
  if (std::memcmp(magic, "LOOMGLD1", 8) != 0) throw std::runtime_error(path + ": bad magic");
  uint32_t version, count;
  rd(&version, 4);
  rd(&count, 4);
  if (version != 1) throw std::runtime_error(path + ": unsupported version " + std::to_string(version));
  std::map<std::string, GoldenEntry> out;
  for (uint32_t e = 0; e < count; ++e) {
    uint32_t len;
    rd(&len, 4);
    std::string name(len, '\0');
    rd(name.data(), len);
    GoldenEntry g;
    uint32_t ndim;
    rd(&g.dtype, 4);
    rd(&ndim, 4);
    g.dims.resize(ndim);
    size_t n = 1;
    for (auto& d : g.dims) {
      rd(&d, 8);
      n *= size_t(d);
    }
    if (g.dtype == 0) {
      g.f32.resize(n);
      rd(g.f32.data(), n * 4);
    } else {
      g.i32.resize(n);
      rd(g.i32.data(), n * 4);
    }
    out.emplace(std::move(name), std::move(g));
  }
  return out;
}

}  // namespace loom::test
