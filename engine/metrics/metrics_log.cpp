#include "engine/metrics/metrics_log.hpp"

#include <cmath>
#include <filesystem>
#include <fstream>
#include <stdexcept>

namespace loom {

MetricsLog::MetricsLog(const std::string& dir, int64_t resume_step) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) throw std::runtime_error("log.dir=" + dir + ": cannot create the run directory: " + ec.message());
  path_ = dir + "/metrics.jsonl";
  std::string kept;
  if (resume_step > 0) {
    std::ifstream in(path_);
    std::string line;
    while (std::getline(in, line)) {
      const auto pos = line.find("\"step\": ");
      if (pos != std::string::npos && std::stoll(line.substr(pos + 8)) < resume_step) kept += line + "\n";
    }
  }
  f_ = std::fopen(path_.c_str(), "w");
  if (f_) std::fputs(kept.c_str(), f_);
  if (!f_) throw std::runtime_error("log.dir=" + dir + ": cannot open " + path_ + " for writing");
}

MetricsLog::~MetricsLog() {
  if (f_) std::fclose(f_);
}

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
  std::fputs(line.c_str(), f_);
  std::fflush(f_);
}

}  // namespace loom
