#include "parallel/launcher_env.hpp"

#include <cstdlib>
#include <initializer_list>

namespace loom::parallel {
namespace {
// The first of `names` that is set, as an int; `fallback` if none is.
int env_int(std::initializer_list<const char*> names, int fallback) {
  for (const char* n : names)
    if (const char* v = std::getenv(n); v && *v) return std::atoi(v);
  return fallback;
}
}  // namespace

int launcher_rank() { return env_int({"OMPI_COMM_WORLD_RANK", "PMIX_RANK", "PMI_RANK", "SLURM_PROCID"}, 0); }

int launcher_size() { return env_int({"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "SLURM_NTASKS"}, 1); }

double mpirun_kill_grace_s() {
  if (!std::getenv("OMPI_MCA_orte_hnp_uri")) return -1;
  const char* v = std::getenv("OMPI_MCA_odls_base_sigkill_timeout");
  return v && *v ? std::atof(v) : 1.0;
}

}  // namespace loom::parallel
