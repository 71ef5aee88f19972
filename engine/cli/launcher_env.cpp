#include <cstdlib>
#include <string>

#include "engine/cli/commands.hpp"

namespace loom::cli {
namespace {
int env_int(const char* const* names, int fallback) {
  for (const char* const* n = names; *n; ++n)
    if (const char* v = std::getenv(*n)) return std::atoi(v);
  return fallback;
}
}  // namespace

int launcher_rank() {
  static const char* names[] = {"OMPI_COMM_WORLD_RANK", "PMIX_RANK", "PMI_RANK", "SLURM_PROCID", nullptr};
  return env_int(names, 0);
}

int launcher_size() {
  static const char* names[] = {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "SLURM_NTASKS", nullptr};
  return env_int(names, 1);
}

}  // namespace loom::cli
