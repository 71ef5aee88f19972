#pragma once
// The safetensors format (Hugging Face's weights files), read and written by Loom's own code:
//   8 bytes   N, the header's length (little-endian u64)
//   N bytes   JSON: {"name": {"dtype": "F32"|"BF16"|"F16"|..., "shape": [...],
//                     "data_offsets": [begin, end]}, ..., "__metadata__": {"key": "value"}}
//             (offsets relative to the end of the header; may be padded with spaces)
//   the data  each tensor's raw little-endian elements, row-major, at its offsets
// Loom reads F32, BF16 and F16 tensors (converting to fp32) and writes F32 or BF16. Every problem
// with a file is a std::runtime_error naming the file and, where there is one, the tensor:
// a truncated file, a header that does not parse or points outside the data, a tensor whose
// byte size does not match its dtype and shape, an unsupported dtype, a missing tensor, a tensor
// of another shape than the caller expects.
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "engine/data/mapped_file.hpp"
#include "engine/pretrained/mapped_floats.hpp"

namespace loom {

struct SafetensorsEntry {
  std::string name;
  std::string dtype;             // as written: "F32", "BF16", "F16", "I64", ...
  std::vector<int64_t> shape;
  uint64_t begin = 0, end = 0;   // byte offsets into the data section
  int64_t elements() const;
};

class SafetensorsFile {
 public:
  // Maps the file and validates its header (every entry inside the data section, of the size its
  // dtype and shape say). Throws std::runtime_error naming the file.
  explicit SafetensorsFile(const std::string& path);

  const std::string& path() const { return file_.path(); }
  // In the order of their data offsets.
  const std::vector<SafetensorsEntry>& tensors() const { return entries_; }
  const std::map<std::string, std::string>& metadata() const { return metadata_; }
  // nullptr when absent.
  const SafetensorsEntry* find(const std::string& name) const;
  // Tensor `name` as fp32, row-major. Throws if it is missing, not F32/BF16/F16, or of another
  // shape than `expected` (an empty `expected` accepts any shape).
  std::vector<float> read_f32(const std::string& name, const std::vector<int64_t>& expected = {}) const;
  // Elements [first, first + count) of tensor `name` (row-major) as fp32 into `out`; the pages
  // read are given back (MappedFile::drop_pages). For walking a large tensor in pieces of
  // kReadPiece elements (4 MiB of fp32) without its whole file copy resident. Same errors.
  void read_f32_range(const std::string& name, size_t first, size_t count, float* out) const;
  static constexpr size_t kReadPiece = kMappedFloatPiece;

 private:
  const SafetensorsEntry& readable(const std::string& name) const;  // exists, F32/BF16/F16
  void copy_elements(const SafetensorsEntry& e, size_t first, size_t count, float* out) const;
  MappedFile file_;
  uint64_t data_start_ = 0;
  std::vector<SafetensorsEntry> entries_;
  std::map<std::string, std::string> metadata_;
};

// A tensor to write: fp32 values, stored as F32 or BF16 (rounded to nearest even).
struct SafetensorsTensor {
  std::string name;
  std::vector<int64_t> shape;
  const float* data = nullptr;  // product(shape) values
  std::string dtype = "F32";    // "F32" | "BF16"
};

// Writes the tensors in the order given (data laid out in that order, the header's keys sorted as
// JSON objects are), with `metadata` as "__metadata__". The header is padded with spaces to a
// multiple of 8 bytes, so the data is aligned. Writes `path`.tmp and renames it over `path`
// (never a partial file under the final name). Refuses to replace an existing file. Throws
// std::runtime_error naming the file.
void write_safetensors(const std::string& path, const std::vector<SafetensorsTensor>& tensors,
                       const std::map<std::string, std::string>& metadata = {});

}  // namespace loom
