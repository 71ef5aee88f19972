#include "engine/checkpoint/checkpoint_catalog.hpp"
#include "engine/checkpoint/checkpoint_layout.hpp"

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>

namespace loom {

ManifestHealth manifest_health(const nlohmann::json& manifest) {
  ManifestHealth out;
  if (!manifest.contains("health")) return out;
  const auto& h = manifest["health"];
  out.clean = h.value("clean", true);
  if (h.contains("loss") && h["loss"].is_number()) out.loss = h["loss"].get<double>();
  if (h.contains("first_bad_step") && h["first_bad_step"].is_number_integer())
    out.first_bad_step = h["first_bad_step"].get<int64_t>();
  return out;
}
namespace fs = std::filesystem;

bool parse_checkpoint_name(const std::string& name, int64_t* step) {
  constexpr size_t kPrefix = 5;  // "step_"
  if (name.size() < kPrefix + 8 || name.size() > kPrefix + 18 || name.compare(0, kPrefix, "step_") != 0) return false;
  int64_t v = 0;
  for (size_t i = kPrefix; i < name.size(); ++i) {
    if (name[i] < '0' || name[i] > '9') return false;
    v = v * 10 + (name[i] - '0');
  }
  if (name != checkpoint_name(v)) return false;  // extra leading zeros: a user's name, not ours
  if (step) *step = v;
  return true;
}

std::string checkpoint_name(int64_t step) {
  char b[32];
  std::snprintf(b, sizeof b, "step_%08lld", (long long)step);
  return b;
}

std::string foreign_file_in_partial(const std::string& dir) {
  std::error_code ec;
  for (const auto& f : fs::directory_iterator(dir, ec)) {
    const std::string fn = f.path().filename().string();
    if (fn != kCheckpointFile && fn != "manifest.json" && fn != "manifest.json.tmp") return fn;
  }
  return "";
}

CheckpointCatalog scan_checkpoints(const std::string& dir) {
  CheckpointCatalog c;
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) return c;
  for (const auto& e : fs::directory_iterator(dir, ec)) {
    const std::string name = e.path().filename().string();
    const std::string path = e.path().string();
    if (!e.is_directory(ec)) continue;  // `latest`, the lock file, a user's notes: not ours to judge
    int64_t step = 0;
    if (!parse_checkpoint_name(name, &step)) {
      // An interrupted save's leftovers are ours and expected; anything else is the user's.
      const size_t dot = name.find('.');
      const bool ours = dot != std::string::npos && parse_checkpoint_name(name.substr(0, dot), nullptr);
      if (ours && name.compare(dot, 10, ".replaced-") == 0)
        c.ignored.push_back(path + ": another history's checkpoint, set aside when this run went back to an earlier "
                                   "step: kept, never resumed from automatically (checkpoint.resume=" + path +
                                   " to use it)");
      else if (!(ours && name.ends_with(".partial")))
        c.ignored.push_back(path + ": not a name Loom writes (step_NNNNNNNN): ignored, never resumed from or deleted");
      continue;
    }
    const fs::path man_path = e.path() / "manifest.json";
    if (!fs::exists(man_path, ec)) {
      c.ignored.push_back(path + ": no manifest.json (an incomplete or damaged checkpoint): not used, not deleted");
      continue;
    }
    CheckpointEntry entry;
    entry.path = path;
    try {
      const nlohmann::json man = nlohmann::json::parse(std::ifstream(man_path));
      entry.step = man.at("step").get<int64_t>();
      const ManifestHealth h = manifest_health(man);
      entry.clean = h.clean;
      entry.first_bad_step = h.first_bad_step;
    } catch (const std::exception& ex) {
      c.ignored.push_back(path + ": manifest.json is unreadable (" + ex.what() + "): not used, not deleted");
      continue;
    }
    if (entry.step != step) {
      c.ignored.push_back(path + ": its manifest records step " + std::to_string(entry.step) +
                          ", not the step its name says (renamed or copied?): not used, not deleted");
      continue;
    }
    c.complete.push_back(entry);
  }
  std::sort(c.complete.begin(), c.complete.end(),
            [](const CheckpointEntry& a, const CheckpointEntry& b) { return a.step < b.step; });
  std::sort(c.ignored.begin(), c.ignored.end());
  std::ifstream latest(fs::path(dir) / "latest");
  std::string name;
  if (latest >> name) {
    for (const CheckpointEntry& e : c.complete)
      if (fs::path(e.path).filename() == name) c.latest = e.path;
    int64_t step = -1;
    if (parse_checkpoint_name(name, &step)) c.latest_step = step;  // even if that checkpoint is damaged
    if (c.latest.empty())
      c.ignored.push_back((fs::path(dir) / "latest").string() + " names '" + name.substr(0, 64) +
                          "', not a complete checkpoint here: " +
                          (c.latest_step >= 0 ? "the ones saved before it are tried, newest first"
                                              : "every checkpoint is tried, newest first"));
  }
  return c;
}

std::vector<std::string> resume_order(const CheckpointCatalog& c, std::vector<std::string>* newer_than_latest) {
  std::vector<std::string> out;
  const int64_t latest_step = c.latest_step;
  if (!c.latest.empty()) out.push_back(c.latest);
  for (auto it = c.complete.rbegin(); it != c.complete.rend(); ++it) {
    if (it->path == c.latest) continue;
    if (latest_step >= 0 && it->step > latest_step) {
      if (newer_than_latest) newer_than_latest->push_back(it->path);
      continue;
    }
    out.push_back(it->path);
  }
  return out;
}

std::string last_clean_before(const CheckpointCatalog& c, int64_t step) {
  for (auto it = c.complete.rbegin(); it != c.complete.rend(); ++it)
    if (it->clean && (step < 0 || it->step < step)) return it->path;
  return "";
}

Retention plan_retention(const CheckpointCatalog& c, int keep_last) {
  Retention r;
  // The current history; an abandoned one numbered above `latest` is neither counted nor pruned.
  std::vector<CheckpointEntry> current;
  for (const CheckpointEntry& e : c.complete)
    if (c.latest_step < 0 || e.step <= c.latest_step) current.push_back(e);
  const size_t n = current.size();
  const size_t keep = size_t(std::max(keep_last, 1));
  const size_t keep_from = n > keep ? n - keep : 0;
  // For each checkpoint that is not clean, the last clean one of its history: saved before the
  // first bad step (a checkpoint unclean only for non-finite parameters: before its own step).
  std::set<std::string> pins;
  for (const CheckpointEntry& e : c.complete) {
    if (e.clean) continue;
    const int64_t bad = e.first_bad_step >= 0 ? e.first_bad_step : e.step;
    const std::string p = last_clean_before(c, bad);
    if (!p.empty() && pins.insert(p).second) {
      const bool beyond = std::find_if(current.begin(), current.begin() + long(keep_from),
                                       [&](const CheckpointEntry& x) { return x.path == p; }) !=
                          current.begin() + long(keep_from);
      if (beyond && p != c.latest) r.pinned.push_back({p, bad});
    }
  }
  for (size_t i = 0; i < keep_from; ++i) {
    const std::string& p = current[i].path;
    if (!pins.count(p) && p != c.latest) r.prune.push_back(p);
  }
  return r;
}

}  // namespace loom
