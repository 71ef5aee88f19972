#include "engine/util/memory_room.hpp"

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <vector>

namespace loom {
namespace {

constexpr double kMB = 1024.0 * 1024.0;
// cgroup v1 writes "no limit" as the largest page-aligned int64 (9223372036854771712).
constexpr int64_t kNoLimit = int64_t(1) << 60;

// A file holding one number of bytes (memory.max, memory.current, ...): -1 if absent, not a
// number, or v2's "max".
int64_t read_bytes(const std::string& path) {
  std::ifstream f(path);
  std::string s;
  if (!(f >> s)) return -1;
  char* end = nullptr;
  const long long v = std::strtoll(s.c_str(), &end, 10);
  return end && *end == '\0' && v >= 0 ? int64_t(v) : -1;
}

// The value of `key` in a file of "key value" lines (memory.stat; /proc/meminfo, whose keys end
// in ':'): -1 if absent.
int64_t read_key(const std::string& path, const std::string& key) {
  std::ifstream f(path);
  std::string line, k;
  while (std::getline(f, line)) {
    std::istringstream in(line);
    int64_t v = 0;
    if (in >> k >> v && (k == key || k == key + ":")) return v;
  }
  return -1;
}

std::vector<std::string> split(const std::string& s, char sep) {
  std::vector<std::string> out;
  std::string part;
  std::istringstream in(s);
  while (std::getline(in, part, sep)) out.push_back(part);
  return out;
}

// mountinfo writes a space, tab, newline or backslash in a path as \ooo (octal).
std::string unescape_octal(const std::string& s) {
  std::string out;
  for (size_t i = 0; i < s.size(); ++i) {
    const auto octal = [&](size_t k) { return s[k] >= '0' && s[k] <= '7'; };
    if (s[i] == '\\' && i + 3 < s.size() && octal(i + 1) && octal(i + 2) && octal(i + 3)) {
      out += char((s[i + 1] - '0') * 64 + (s[i + 2] - '0') * 8 + (s[i + 3] - '0'));
      i += 3;
    } else {
      out += s[i];
    }
  }
  return out;
}

// A mounted cgroup hierarchy that has the memory controller (/proc/self/mountinfo): the cgroup
// its root shows (not "/" when the mount is a bind of a sub-tree, as in some containers) and
// where it is mounted.
struct Mount {
  std::string root, point;
  bool v2 = false;
};

std::vector<Mount> memory_mounts(const std::string& prefix) {
  std::vector<Mount> out;
  std::ifstream f(prefix + "/proc/self/mountinfo");
  std::string line;
  while (std::getline(f, line)) {
    // "36 25 0:32 / /sys/fs/cgroup/memory rw,relatime shared:14 - cgroup cgroup rw,memory"
    const size_t dash = line.find(" - ");
    if (dash == std::string::npos) continue;
    const std::vector<std::string> pre = split(line.substr(0, dash), ' ');
    std::istringstream post(line.substr(dash + 3));
    std::string fstype, source, options;
    if (pre.size() < 5 || !(post >> fstype >> source >> options)) continue;
    const std::vector<std::string> opts = split(options, ',');
    const bool v1_memory = fstype == "cgroup" && std::find(opts.begin(), opts.end(), "memory") != opts.end();
    if (fstype == "cgroup2" || v1_memory)
      out.push_back({unescape_octal(pre[3]), unescape_octal(pre[4]), fstype == "cgroup2"});
  }
  return out;
}

// This process's cgroup in the v2 hierarchy ("0::/path") or the v1 memory one ("4:memory:/path").
std::string own_cgroup(const std::string& prefix, bool v2) {
  std::ifstream f(prefix + "/proc/self/cgroup");
  std::string line;
  while (std::getline(f, line)) {
    const size_t a = line.find(':'), b = a == std::string::npos ? a : line.find(':', a + 1);
    if (b == std::string::npos) continue;
    const std::string id = line.substr(0, a), controllers = line.substr(a + 1, b - a - 1);
    const std::vector<std::string> names = split(controllers, ',');
    if (v2 ? id == "0" && controllers.empty() : std::find(names.begin(), names.end(), "memory") != names.end())
      return line.substr(b + 1);
  }
  return "";
}

// The least room any level of the process's memory cgroups leaves, or an unknown MemoryRoom.
MemoryRoom cgroup_room(const std::string& prefix) {
  MemoryRoom best;
  for (const Mount& m : memory_mounts(prefix)) {
    const std::string path = own_cgroup(prefix, m.v2);
    if (path.empty()) continue;
    // The cgroup's directory under the mount point; a cgroup outside the mount's root is not
    // visible from here.
    std::string rel;
    if (m.root == "/") {
      rel = path == "/" ? "" : path;
    } else if (path == m.root || path.compare(0, m.root.size() + 1, m.root + "/") == 0) {
      rel = path.substr(m.root.size());
    } else {
      continue;
    }
    const std::string top = prefix + m.point;
    for (std::string dir = top + rel;; dir = dir.substr(0, dir.rfind('/'))) {
      const char* limit_file = m.v2 ? "memory.max" : "memory.limit_in_bytes";
      const int64_t limit = read_bytes(dir + "/" + limit_file);
      const int64_t usage = read_bytes(dir + (m.v2 ? "/memory.current" : "/memory.usage_in_bytes"));
      if (limit >= 0 && limit < kNoLimit && usage >= 0) {
        const int64_t cache = read_key(dir + "/memory.stat", m.v2 ? "inactive_file" : "total_inactive_file");
        const int64_t used = std::max<int64_t>(0, usage - std::max<int64_t>(0, cache));
        const double room = std::max(0.0, double(limit - used) / kMB);
        if (!best.known() || room < best.mb) {
          char b[160];
          std::snprintf(b, sizeof b, " (%s %.0f MB, %.0f MB in use) leaves %.0f MB", limit_file, limit / kMB,
                        used / kMB, room);
          best.mb = room;
          best.where = "the memory cgroup " + dir.substr(prefix.size()) + b;
        }
      }
      if (dir.size() <= top.size()) break;
    }
  }
  return best;
}

}  // namespace

MemoryRoom memory_room(const std::string& root) {
  MemoryRoom room;
  const int64_t kb = read_key(root + "/proc/meminfo", "MemAvailable");
  if (kb >= 0) {
    room.mb = kb / 1024.0;
    room.where = "the node has " + std::to_string(kb / 1024) + " MB available";
  }
  MemoryRoom cg = cgroup_room(root);
  if (cg.known() && (!room.known() || cg.mb < room.mb)) room = cg;
  return room;
}

}  // namespace loom
