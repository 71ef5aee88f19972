#pragma once
// A read-only memory map of a whole file (RAII). Token shards are read through these, so a
// dataset of any size costs address space, not memory.
#include <cstddef>
#include <string>

namespace loom {

class MappedFile {
 public:
  explicit MappedFile(const std::string& path);  // throws std::runtime_error naming the file
  ~MappedFile();
  MappedFile(MappedFile&& o) noexcept;
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;
  MappedFile& operator=(MappedFile&&) = delete;

  const unsigned char* data() const { return data_; }
  size_t size() const { return size_; }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
  const unsigned char* data_ = nullptr;
  size_t size_ = 0;
};

}  // namespace loom
