#pragma once
// metrics.jsonl: one JSON object per logged step, written by rank 0 and flushed per line so
// that a crash loses nothing that was logged.
#include <cstdio>
#include <string>
#include <utility>
#include <vector>

namespace loom {

class MetricsLog {
 public:
  // Creates `dir` if needed and opens dir/metrics.jsonl (truncated).
  explicit MetricsLog(const std::string& dir);
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
