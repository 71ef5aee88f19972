#pragma once
// A read-only memory map of a whole file (RAII). Token shards are read through these, so a
// dataset of any size costs address space, not memory.
#include <cstddef>
#include <string>

namespace loom {

// What `path` is when it is not a regular file: "a FIFO (named pipe)", "a socket", "a character
// device", "a block device", "a directory", "a broken symbolic link", "a special file"; "" for a
// regular file (or a symbolic link to one) and for a path that does not exist. Uses stat(),
// never open(): opening a FIFO for reading blocks until a writer appears.
std::string special_file_kind(const std::string& path);

class MappedFile {
 public:
  // Throws std::runtime_error naming the file; refuses anything but a regular file (without
  // blocking on a FIFO).
  explicit MappedFile(const std::string& path);
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
