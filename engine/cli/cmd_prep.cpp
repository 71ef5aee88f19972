// `loom prep`: text files -> token shards + manifest (docs/data.md).
#include <sys/resource.h>

#include <cstdio>
#include <stdexcept>

#include "engine/cli/commands.hpp"

namespace loom::cli {

int cmd_prep(const PrepOptions& o) {
  try {
    PrepSummary s = run_prep(o);
    rusage ru{};
    getrusage(RUSAGE_SELF, &ru);
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
