#include "engine/util/atomic_file.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <stdexcept>

namespace loom {

void fsync_path(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY);
  if (fd >= 0) {
    ::fsync(fd);
    ::close(fd);
  }
}

void write_file_atomically(const std::string& path, const std::string& text, const std::string& hint) {
  const std::string tmp = path + ".tmp";
  {
    errno = 0;
    std::ofstream f(tmp);
    f << text;
    f.close();  // the buffered bytes are written here: a full disk shows up now, not after the rename
    if (!f) {
      const std::string why = errno ? std::string(": ") + std::strerror(errno) : std::string();
      std::error_code ec;
      std::filesystem::remove(tmp, ec);
      throw std::runtime_error(tmp + ": write failed" + why + (hint.empty() ? "" : " (" + hint + ")"));
    }
  }
  fsync_path(tmp);
  std::filesystem::rename(tmp, path);
}

}  // namespace loom
