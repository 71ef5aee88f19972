#pragma once
// The current time in UTC, formatted with strftime: "%Y-%m-%dT%H:%M:%SZ" for records (run.json,
// lock files), "%Y%m%dT%H%M%SZ" for file names.
#include <ctime>
#include <string>

namespace loom {

inline std::string utc_now(const char* format = "%Y-%m-%dT%H:%M:%SZ") {
  const std::time_t t = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char b[64];
  std::strftime(b, sizeof b, format, &tm);
  return b;
}

}  // namespace loom
