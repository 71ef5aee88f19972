#pragma once
// run.json and recipe.yaml in log.dir: what a run was (recipe, command, code version, where it
// ran) and how each of its sessions ended. A run resumed from a checkpoint is a new session of
// the same run: run.json keeps the earlier sessions and appends one. Written by rank 0,
// atomically (temporary + rename), at the start and at the end of each session; a session
// killed outright keeps "ended": null. Holds log.dir's lock (DirLock) while it lives.
#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "engine/util/dir_lock.hpp"

namespace loom {

struct RankPlace {
  int rank = 0, tp = 0, dp = 0, pp = 0;
  std::string host;
};

struct SessionInfo {
  std::string command;       // the exact command line
  std::string recipe_yaml;   // the resolved recipe
  std::string backend;       // "cpu", "cuda"
  std::string mpi_version, nccl_version, cuda_version;  // "" when not built in
  std::vector<RankPlace> ranks;
  int64_t start_step = 0;
  std::string resumed_from;  // checkpoint directory, "" for a fresh start
};

class RunRecord {
 public:
  // Takes log.dir's lock (shared with this process's MetricsLog; throws if another job holds it),
  // reads dir/run.json if there is one (an earlier session), appends this session, writes
  // run.json and recipe.yaml. Throws std::runtime_error naming the file if they cannot be
  // written.
  RunRecord(const std::string& dir, const SessionInfo& session);
  // Ends the session: end step, exit status and, if it failed, the error. Throws
  // std::runtime_error if run.json cannot be written (a full disk), except when recording a
  // failure (exit status 1): the job is already failing with its own error, which a second one
  // must not replace (nor, thrown from a failure path, turn into std::terminate), so the write
  // error is printed to stderr instead.
  void finish(int64_t end_step, int exit_status, const std::string& error = "");
  // Sets `key` of this session's entry (e.g. the memory report) and rewrites run.json.
  void set(const std::string& key, nlohmann::json value);
  const std::string& path() const { return path_; }

 private:
  void save() const;
  DirLock lock_;
  std::string path_;
  nlohmann::json doc_;
};

// ISO 8601 UTC time, e.g. 2026-11-22T19:02:15Z.
std::string utc_now_iso();

}  // namespace loom
