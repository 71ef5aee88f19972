#include "engine/metrics/run_record.hpp"

#include <cstdio>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <stdexcept>

#include "engine/util/atomic_file.hpp"
#include "engine/util/utc_time.hpp"
#include "loom_version.hpp"

namespace loom {
namespace fs = std::filesystem;

std::string utc_now_iso() { return utc_now(); }

RunRecord::RunRecord(const std::string& dir, const SessionInfo& s) {
  lock_ = DirLock::acquire(dir, "log.dir");  // creates dir
  path_ = (fs::path(dir) / "run.json").string();
  if (fs::exists(path_)) {
    try {
      doc_ = nlohmann::json::parse(std::ifstream(path_));
    } catch (const std::exception& e) {
      throw std::runtime_error(path_ + ": exists but does not parse (" + e.what() +
                               "); move it away or choose another log.dir");
    }
  }
  if (!doc_.is_object()) doc_ = nlohmann::json::object();
  if (!doc_.contains("sessions")) doc_["sessions"] = nlohmann::json::array();
  const std::string commit = LOOM_GIT_COMMIT;
  const bool dirty = commit.size() > 6 && commit.compare(commit.size() - 6, 6, "-dirty") == 0;
  nlohmann::json ranks = nlohmann::json::array();
  for (const RankPlace& r : s.ranks)
    ranks.push_back({{"rank", r.rank}, {"host", r.host}, {"tp", r.tp}, {"dp", r.dp}, {"pp", r.pp}});
  doc_["sessions"].push_back({{"started", utc_now_iso()},
                              {"ended", nullptr},
                              {"exit_status", nullptr},
                              {"command", s.command},
                              {"loom_version", LOOM_VERSION},
                              {"git_commit", dirty ? commit.substr(0, commit.size() - 6) : commit},
                              {"git_dirty", dirty},
                              {"backend", s.backend},
                              {"mpi", s.mpi_version},
                              {"nccl", s.nccl_version.empty() ? nullptr : nlohmann::json(s.nccl_version)},
                              {"cuda", s.cuda_version.empty() ? nullptr : nlohmann::json(s.cuda_version)},
                              {"ranks", ranks},
                              {"start_step", s.start_step},
                              {"resumed_from", s.resumed_from.empty() ? nullptr : nlohmann::json(s.resumed_from)},
                              {"recipe", s.recipe_yaml}});
  save();
  write_file_atomically((fs::path(dir) / "recipe.yaml").string(), s.recipe_yaml, "log.dir");
}

void RunRecord::finish(int64_t end_step, int exit_status, const std::string& error) {
  auto& s = doc_["sessions"].back();
  s["ended"] = utc_now_iso();
  s["end_step"] = end_step;
  s["exit_status"] = exit_status;
  if (!error.empty()) s["error"] = error;
  // Recording the end must not change it: a full disk here would turn a finished or resumable
  // run (0, 4, 75) into a failure, or hide the first error of a failed one.
  try {
    save();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "loom: %s: could not record the session's end (exit status %d) in run.json: %s\n",
                 exit_status == 1 ? "error" : "warning", exit_status, e.what());
  }
}

void RunRecord::set(const std::string& key, nlohmann::json value) {
  doc_["sessions"].back()[key] = std::move(value);
  save();
}

void RunRecord::save() const { write_file_atomically(path_, doc_.dump(2) + "\n", "log.dir"); }

}  // namespace loom
