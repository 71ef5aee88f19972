#include "engine/data/mapped_file.hpp"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <stdexcept>

namespace loom {

namespace {
const char* kind_of(mode_t m) {
  if (S_ISREG(m)) return "";
  if (S_ISDIR(m)) return "a directory";
  if (S_ISFIFO(m)) return "a FIFO (named pipe)";
  if (S_ISSOCK(m)) return "a socket";
  if (S_ISCHR(m)) return "a character device";
  if (S_ISBLK(m)) return "a block device";
  return "a special file";
}
}  // namespace

std::string special_file_kind(const std::string& path) {
  struct stat st{};
  if (::stat(path.c_str(), &st) == 0) return kind_of(st.st_mode);
  if (::lstat(path.c_str(), &st) == 0 && S_ISLNK(st.st_mode)) return "a broken symbolic link";
  return "";
}

MappedFile::MappedFile(const std::string& path) : path_(path) {
  // O_NONBLOCK: opening a FIFO must not wait for a writer; it is refused just below.
  int fd = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) throw std::runtime_error(path + ": cannot open: " + std::strerror(errno));
  struct stat st{};
  if (::fstat(fd, &st) != 0) {
    const int err = errno;
    ::close(fd);
    throw std::runtime_error(path + ": cannot stat: " + std::strerror(err));
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    throw std::runtime_error(path + " is " + kind_of(st.st_mode) + ", not a regular file");
  }
  size_ = static_cast<size_t>(st.st_size);
  if (size_ > 0) {
    void* p = ::mmap(nullptr, size_, PROT_READ, MAP_PRIVATE, fd, 0);
    if (p == MAP_FAILED) {
      ::close(fd);
      throw std::runtime_error(path + ": mmap failed: " + std::strerror(errno));
    }
    ::madvise(p, size_, MADV_RANDOM);  // samples are read at shuffled offsets
    data_ = static_cast<const unsigned char*>(p);
  }
  ::close(fd);
}

MappedFile::MappedFile(MappedFile&& o) noexcept : path_(std::move(o.path_)), data_(o.data_), size_(o.size_) {
  o.data_ = nullptr;
  o.size_ = 0;
}

void MappedFile::drop_pages(size_t offset, size_t len) const {
  if (!data_ || offset >= size_ || len == 0) return;
  const size_t page = size_t(::sysconf(_SC_PAGESIZE));
  const size_t begin = offset / page * page;
  const size_t end = std::min(offset + std::min(len, size_ - offset) + page - 1, size_ + page - 1) / page * page;
  ::madvise(const_cast<unsigned char*>(data_) + begin, end - begin, MADV_DONTNEED);  // advice: failure is harmless
}

MappedFile::~MappedFile() {
  if (data_) ::munmap(const_cast<unsigned char*>(data_), size_);
}

}  // namespace loom
