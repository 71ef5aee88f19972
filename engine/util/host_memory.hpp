#pragma once
// This process's resident memory, from /proc/self/status (Linux): current (VmRSS) and peak
// (VmHWM), in MB. 0 where unavailable.
#include <cstdio>
#include <cstring>

namespace loom {

struct HostMemory {
  double rss_mb = 0, peak_mb = 0;
};

inline HostMemory host_memory() {
  HostMemory m;
  std::FILE* f = std::fopen("/proc/self/status", "r");
  if (!f) return m;
  char line[256];
  while (std::fgets(line, sizeof line, f)) {
    long kb = 0;
    if (std::sscanf(line, "VmRSS: %ld kB", &kb) == 1) m.rss_mb = kb / 1024.0;
    if (std::sscanf(line, "VmHWM: %ld kB", &kb) == 1) m.peak_mb = kb / 1024.0;
  }
  std::fclose(f);
  return m;
}

}  // namespace loom
