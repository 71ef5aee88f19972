#include "kernels/op_timer.hpp"

#include <algorithm>
#include <cstdio>
#include <vector>

namespace loom {

std::string OpTimer::report() const {
  std::vector<std::pair<std::string, Stat>> rows(stats_.begin(), stats_.end());
  std::sort(rows.begin(), rows.end(), [](auto& a, auto& b) { return a.second.seconds > b.second.seconds; });
  double total = 0;
  for (auto& r : rows) total += r.second.seconds;
  std::string out = "op                        calls    total ms   share\n";
  char line[160];
  for (auto& [name, s] : rows) {
    std::snprintf(line, sizeof line, "%-24s %6ld %11.1f %6.1f%%\n", name.c_str(), s.calls, s.seconds * 1e3,
                  total > 0 ? 100 * s.seconds / total : 0.0);
    out += line;
  }
  std::snprintf(line, sizeof line, "%-24s %6s %11.1f\n", "total", "", total * 1e3);
  return out + line;
}

}  // namespace loom
