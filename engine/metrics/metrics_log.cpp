#include "engine/metrics/metrics_log.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <stdexcept>

#include <nlohmann/json.hpp>

#include "engine/util/append_whole.hpp"

namespace loom {

namespace {
// The value of "key": N in a line we wrote, or -1.
int64_t int_field(const std::string& line, const char* key) {
  const auto pos = line.find(key);
  if (pos == std::string::npos) return -1;
  return std::strtoll(line.c_str() + pos + std::strlen(key), nullptr, 10);
}

// Sessions recorded in dir/run.json (0 if there is none or it does not parse).
int sessions_in_run_json(const std::string& dir) {
  std::ifstream in(dir + "/run.json");
  if (!in) return 0;
  try {
    const auto doc = nlohmann::json::parse(in);
    if (doc.is_object() && doc.contains("sessions") && doc["sessions"].is_array()) return int(doc["sessions"].size());
  } catch (const std::exception&) {
  }
  return 0;
}
}  // namespace

MetricsLog::MetricsLog(const std::string& dir, int64_t resume_step) {
  lock_ = DirLock::acquire(dir, "log.dir");  // creates dir; one job per log.dir
  path_ = dir + "/metrics.jsonl";
  fd_ = ::open(path_.c_str(), O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644);
  if (fd_ < 0)
    throw std::runtime_error("log.dir=" + dir + ": cannot open " + path_ + " for appending: " + std::strerror(errno));
  struct stat st {};
  if (::fstat(fd_, &st) != 0) st.st_size = 0;

  // What the earlier sessions left: complete lines (a line is complete with its '\n'), the last
  // step still in effect (markers supersede the rows before them from their step on), markers.
  off_t complete = 0;
  int64_t last_step = -1, rows = 0, markers = 0;
  bool read_whole = st.st_size == 0;  // the file was read to its end without an error
  if (st.st_size > 0) {
    std::ifstream in(path_, std::ios::binary);
    if (!in) throw std::runtime_error(path_ + ": cannot read it to append to it: " + std::strerror(errno) + " (log.dir)");
    std::string line;
    while (std::getline(in, line) && !in.eof()) {
      complete += off_t(line.size()) + 1;
      if (const int64_t at = int_field(line, "\"resumed_at_step\": "); at >= 0) {
        ++markers;
        last_step = std::min(last_step, at - 1);
      } else if (const int64_t step = int_field(line, "\"step\": "); step >= 0) {
        ++rows;
        last_step = std::max(last_step, step);
      }
    }
    read_whole = in.eof() && !in.bad();
  }
  size_ = complete;
  if (!read_whole)
    throw std::runtime_error(path_ + ": reading it failed before its end (" + std::strerror(errno) +
                             "); nothing was changed (log.dir)");
  // Only a tail without a newline, of at most one line's size, is an incomplete line; anything
  // longer is not what an interrupted write leaves, and is not Loom's to cut.
  if (st.st_size > complete && st.st_size - complete > (off_t(1) << 16))
    throw std::runtime_error(path_ + ": ends with " + std::to_string((long long)(st.st_size - complete)) +
                             " bytes without a newline, more than one interrupted line; not appending to it (log.dir)");
  if (st.st_size > complete) {
    // A line cut short by a job that died mid-write (or by an older Loom on a full disk): it is
    // not JSON and the next line would be glued to it.
    if (::ftruncate(fd_, complete) != 0)
      throw std::runtime_error(path_ + ": cannot remove an incomplete last line: " + std::strerror(errno) + " (log.dir)");
    std::fprintf(stderr, "loom: warning: %s ended with an incomplete line (%lld bytes, written by a job that died "
                 "mid-write); removed it\n", path_.c_str(), (long long)(st.st_size - complete));
  }
  const int recorded = sessions_in_run_json(dir);
  session_ = recorded > 0 ? recorded + 1 : (rows > 0 ? int(markers) + 2 : 1);
  if (last_step >= resume_step) {
    if (resume_step == 0)
      std::fprintf(stderr,
                   "loom: warning: log.dir=%s already holds a run (%lld rows in metrics.jsonl); this fresh start is "
                   "appended to it as session %d and nothing is deleted, but readers now show this session's steps. "
                   "Give each run its own log.dir to keep them apart.\n",
                   dir.c_str(), (long long)rows, session_);
    append("{\"session\": " + std::to_string(session_) + ", \"resumed_at_step\": " + std::to_string(resume_step) +
           "}\n");
  }
}

MetricsLog::~MetricsLog() {
  if (fd_ >= 0) ::close(fd_);
}

// Never a torn line: a failed write cuts back to the end of the last complete one.
void MetricsLog::append(const std::string& line) { append_whole(fd_, size_, line, path_, "line"); }

void MetricsLog::write(const std::vector<std::pair<std::string, double>>& fields) {
  std::string line = "{";
  char buf[64];
  for (size_t i = 0; i < fields.size(); ++i) {
    const double v = fields[i].second;
    if (!std::isfinite(v)) std::snprintf(buf, sizeof buf, "null");
    else if (v == std::floor(v) && std::fabs(v) < 1e15) std::snprintf(buf, sizeof buf, "%.0f", v);
    else std::snprintf(buf, sizeof buf, "%.9g", v);
    line += (i ? ", \"" : "\"") + fields[i].first + "\": " + buf;
  }
  line += "}\n";
  append(line);
}

}  // namespace loom
