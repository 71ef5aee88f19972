#pragma once
// metrics.jsonl: one JSON object per logged step, written by rank 0, each line with one write()
// so that a crash loses nothing that was logged and no line is ever torn.
//
// The file is append-only: a run's sessions (a fresh start, each resume) add to it and nothing is
// ever deleted. A session that starts at a step the file already has rows for (resumed from a
// checkpoint older than the last logged step, or a fresh start into a log.dir that holds a run)
// first appends a marker line
//     {"session": 2, "resumed_at_step": 40}
// meaning: the rows before it from step 40 on are superseded (those steps are being redone).
// Readers apply the markers in order (scripts/plot_metrics.py does); a run resumed exactly where
// it stopped needs none, so its file reads as one run with every step once.
#include <sys/types.h>

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "engine/util/dir_lock.hpp"

namespace loom {

class MetricsLog {
 public:
  // Takes log.dir's lock (DirLock: throws if another job holds it), creates `dir` if needed and
  // opens dir/metrics.jsonl for appending. `resume_step` is the first step this session runs.
  // Throws std::runtime_error naming the file if it cannot be opened or written.
  explicit MetricsLog(const std::string& dir, int64_t resume_step = 0);
  ~MetricsLog();
  MetricsLog(const MetricsLog&) = delete;
  MetricsLog& operator=(const MetricsLog&) = delete;

  // Fields are written in the order given. Non-finite numbers are written as null (JSON has no
  // NaN). Integers are written without a fraction. A failed write (a full disk) throws
  // std::runtime_error naming the file and the reason ("No space left on device"); whatever
  // part of the line got written is cut off again, so the file ends with a complete line.
  void write(const std::vector<std::pair<std::string, double>>& fields);
  const std::string& path() const { return path_; }
  int session() const { return session_; }  // 1 for a run's first session, as in run.json

 private:
  void append(const std::string& line);
  DirLock lock_;
  std::string path_;
  int fd_ = -1;
  off_t size_ = 0;  // bytes of complete lines in the file
  int session_ = 1;
};

}  // namespace loom
