#include "engine/util/append_whole.hpp"

#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <stdexcept>

namespace loom {

void append_whole(int fd, off_t& size, const std::string& data, const std::string& path, const char* unit) {
  size_t done = 0;
  while (done < data.size()) {
    const ssize_t n = ::write(fd, data.data() + done, data.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      const int err = n < 0 ? errno : ENOSPC;
      if (done > 0) {  // best effort: the error below is the one to report
        const int rc = ::ftruncate(fd, size);
        (void)rc;
        ::lseek(fd, size, SEEK_SET);  // (a no-op for files opened O_APPEND)
      }
      throw std::runtime_error(path + ": write failed: " + std::strerror(err) +
                               " (log.dir; the file ends with the last complete " + unit + ")");
    }
    done += size_t(n);
  }
  size += off_t(data.size());
}

}  // namespace loom
