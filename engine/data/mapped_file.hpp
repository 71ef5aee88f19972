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

  // Gives the pages holding bytes [offset, offset + len) back to the kernel (madvise
  // MADV_DONTNEED): they stay in the page cache and come back from it if touched again, but leave
  // this process's resident set. A start-up scan of a whole dataset (CRC, token check) or a copy
  // of a pretrained tensor out of the map would otherwise keep every page it read resident,
  // counted in the process's peak RSS for nothing. (Memory cgroups, Slurm's included, charge
  // the page cache either way; those pages are clean and reclaimable.)
  void drop_pages(size_t offset, size_t len) const;

 private:
  std::string path_;
  const unsigned char* data_ = nullptr;
  size_t size_ = 0;
};

}  // namespace loom
