// The Trainer's Chrome traces (log.trace): each traced session's file names in log.dir, chosen
// once for every rank, and the writing of this rank's.
#include <cstdio>
#include <filesystem>

#include "engine/train/trainer.hpp"
#include "parallel/host_collectives.hpp"

namespace loom {
namespace {

// "trace" for log.dir's first traced session, then "trace_s2", "trace_s3", ...: the first name no
// file of log.dir starts with (a later session in the same log.dir, which appends to its
// metrics, never writes over an earlier session's traces, nor mixes its ranks with them).
std::string free_trace_prefix(const std::string& log_dir) {
  auto taken = [&](const std::string& prefix) {
    std::error_code ec;
    for (std::filesystem::directory_iterator it(log_dir, ec), end; !ec && it != end; it.increment(ec))
      if (it->path().filename().string().starts_with(prefix + "_rank")) return true;
    return false;
  };
  if (!taken("trace")) return "trace";
  for (int s = 2;; ++s)
    if (!taken("trace_s" + std::to_string(s))) return "trace_s" + std::to_string(s);
}

}  // namespace

std::string Trainer::agreed_trace_prefix() {
  return parallel::broadcast_string(groups_.world(), rank_ == 0 ? free_trace_prefix(r_.log.dir) : "");
}

void Trainer::write_trace() {
  trace_.set_enabled(false);
  std::filesystem::create_directories(r_.log.dir);
  const std::string path =
      (std::filesystem::path(r_.log.dir) / (trace_prefix_ + "_rank" + std::to_string(rank_) + ".json")).string();
  trace_.write(path);
  if (rank_ == 0)
    std::printf("loom: wrote Chrome traces %s/%s_rank*.json (chrome://tracing, ui.perfetto.dev)\n",
                r_.log.dir.c_str(), trace_prefix_.c_str());
}

}  // namespace loom
