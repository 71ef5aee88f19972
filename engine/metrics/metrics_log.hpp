#pragma once
// metrics.jsonl: one JSON object per logged step, written by rank 0 and flushed per line so
// that a crash loses nothing that was logged.
#include <cstdint>
#include <cstdio>
#include <string>
#include <utility>
#include <vector>

namespace loom {

class MetricsLog {
 public:
  // Creates `dir` if needed and opens dir/metrics.jsonl. A run resumed after `resume_step` steps
  // keeps the lines of the steps before it and drops the rest (they are about to be redone), so
  // the run's metrics have no duplicated and no missing steps; a fresh run (0) starts it empty.
  explicit MetricsLog(const std::string& dir, int64_t resume_step = 0);
  ~MetricsLog();
  MetricsLog(const MetricsLog&) = delete;
  MetricsLog& operator=(const MetricsLog&) = delete;

  // Fields are written in the order given. Non-finite numbers are written as null (JSON has no
  // NaN). Integers are written without a fraction.
  void write(const std::vector<std::pair<std::string, double>>& fields);
  const std::string& path() const { return path_; }

 private:
  std::string path_;
  std::FILE* f_ = nullptr;
};

}  // namespace loom
