#include "engine/util/atomic_file.hpp"

#include <fcntl.h>
#include <unistd.h>

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
    std::ofstream f(tmp);
    f << text;
    if (!f) throw std::runtime_error(tmp + ": write failed" + (hint.empty() ? "" : " (" + hint + ")"));
  }
  fsync_path(tmp);
  std::filesystem::rename(tmp, path);
}

}  // namespace loom
