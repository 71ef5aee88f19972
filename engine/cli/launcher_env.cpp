// The CLI's view of the launcher's environment, before MPI starts: parallel/launcher_env.hpp
// knows the launchers' variable names.
#include "engine/cli/commands.hpp"
#include "parallel/launcher_env.hpp"

namespace loom::cli {

int launcher_rank() { return parallel::launcher_rank(); }

int launcher_size() { return parallel::launcher_size(); }

}  // namespace loom::cli
