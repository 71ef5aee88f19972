// `loom prep`: text files -> token shards + manifest (docs/data.md); `loom prep --check DIR`.
#include <sys/resource.h>

#include <cstdio>
#include <stdexcept>

#include "engine/cli/commands.hpp"

namespace loom::cli {
namespace {

// Exit 0 when every shard matches the manifest, 1 when any is damaged or missing.
int check_dir(const std::string& dir) {
  PreparedDirCheck c = check_prepared_dir(dir);
  size_t bad = 0;
  for (const auto& s : c.shards) {
    std::printf("%-8s %-5s %s: %s\n", s.ok ? "OK" : "DAMAGED", s.split.c_str(), s.file.c_str(), s.detail.c_str());
    bad += !s.ok;
  }
  for (const auto& f : c.unlisted)
    std::printf("note: %s is not listed in manifest.json (training ignores it)\n", f.c_str());
  if (bad) {
    std::printf("loom prep --check %s: %zu of %zu shards damaged\n", dir.c_str(), bad, c.shards.size());
    return 1;
  }
  std::printf("loom prep --check %s: all %zu shards OK\n", dir.c_str(), c.shards.size());
  return 0;
}

}  // namespace

int cmd_prep(const PrepOptions& o) {
  try {
    if (!o.check.empty()) {
      if (!o.inputs.empty() || !o.out.empty() || o.force)
        throw std::runtime_error("--check DIR verifies an existing prepared directory: it takes no input files, "
                                 "--out or --force");
      return check_dir(o.check);
    }
    if (o.inputs.empty())
      throw std::runtime_error("no input files given (loom prep [OPTIONS] --out DIR FILES..., or --check DIR)");
    if (o.out.empty())
      throw std::runtime_error("--out DIR is required: the directory to write the shards and manifest.json to");
    PrepSummary s = run_prep(o);
    rusage ru{};
    getrusage(RUSAGE_SELF, &ru);
    if (s.replaced) std::printf("loom prep: --force: replaced the previous contents of %s\n", o.out.c_str());
    std::printf("loom prep: %.1f MB of text, %llu documents (%llu to val) -> %llu train + %llu val tokens in %s "
                "| %.1f s, %.1f MB/s, peak RSS %.1f MB\n",
                s.input_bytes / 1e6, (unsigned long long)s.documents, (unsigned long long)s.val_documents,
                (unsigned long long)s.train_tokens, (unsigned long long)s.val_tokens, o.out.c_str(), s.seconds,
                s.input_bytes / 1e6 / s.seconds, ru.ru_maxrss / 1024.0);
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "loom prep: error: %s\n", e.what());
    return 2;
  }
}

}  // namespace loom::cli
