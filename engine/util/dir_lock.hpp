#pragma once
// One job per directory: DIR/.loom.lock, held for as long as the DirLock lives.
//
// The lock is flock() on DIR/.loom.lock (released by the kernel when the process dies, however
// it dies) plus what the file says: the holder's host, pid, start time and Slurm job id. flock is
// not reliable across the nodes of a cluster (NFS and Lustre may keep it per node), so the file's
// contents decide there:
//  - flock held by another process (same node, or a shared filesystem that honours it): refused,
//    naming the holder;
//  - a lock file left by a process of this host that is no longer running (killed, crashed): stale,
//    taken over with a warning on stderr;
//  - a lock file left by an earlier run of the same Slurm job (SLURM_JOB_ID; a requeued job keeps
//    its id and may land on another node): taken over with a warning;
//  - a lock file written by another host: refused (that job may still be running there); the
//    message says to delete the lock file if that job is known to be gone.
// A clean release (destructor) deletes the lock file. A process that already holds the lock of a
// directory gets a second handle to the same lock (e.g. checkpoint.dir == log.dir).
#include <memory>
#include <string>

namespace loom {

class DirLock {
 public:
  // Creates `dir` if needed and takes its lock. `key` names the setting that chose the directory
  // ("log.dir", "checkpoint.dir") in messages. Throws std::runtime_error when another job holds
  // it (the message names the holder's host and pid and the lock file) or the lock file cannot
  // be written.
  static DirLock acquire(const std::string& dir, const std::string& key);

  DirLock() = default;  // holds nothing
  DirLock(DirLock&&) noexcept = default;
  DirLock& operator=(DirLock&&) noexcept = default;
  ~DirLock() = default;  // the last handle of a directory releases it (deletes the lock file)

  bool held() const { return held_ != nullptr; }
  const std::string& path() const;  // DIR/.loom.lock ("" when nothing is held)
  void release() { held_.reset(); }

  struct Held;  // the open, flock'ed lock file; shared by this process's handles of one directory

 private:
  std::shared_ptr<Held> held_;
};

}  // namespace loom
