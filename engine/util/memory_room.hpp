#pragma once
// How much memory this process may still take before the kernel refuses it or kills it: the
// node's MemAvailable (/proc/meminfo), lowered to what this process's memory cgroup leaves when
// that is less. A Slurm job with --mem (ConstrainRAMSpace=yes), a container and a systemd slice
// are such cgroups: there MemAvailable counts the whole node's memory while the kernel's OOM
// killer ends the job at its limit, with SIGKILL and no word of why.
//
// cgroup v2 (memory.max, memory.current) and v1 (memory.limit_in_bytes, memory.usage_in_bytes)
// are both read, at every level from the process's own cgroup up to the mount's root (a parent's
// limit binds its children: Slurm puts it on the job, the tasks sit in step cgroups below). A
// cgroup's page cache that the kernel can drop (inactive_file) is not counted as used.
#include <string>

namespace loom {

struct MemoryRoom {
  double mb = 0;      // what may still be allocated, in MB
  std::string where;  // what bounds it, for messages; empty when neither figure could be read
                      // "the node has 23707 MB available" or "the memory cgroup
                      // /sys/fs/cgroup/slurm/uid_0/job_7 (memory.max 4096 MB, 1205 MB in use) leaves 2891 MB"
  bool known() const { return !where.empty(); }
};

// `root` prefixes every path read ("" on a real system; a test points it at a made-up tree of
// proc/meminfo, proc/self/cgroup, proc/self/mountinfo and the cgroup files).
MemoryRoom memory_room(const std::string& root = "");

}  // namespace loom
