// `loom ckpt inspect DIR`: what a checkpoint holds (verified first). DIR may be a checkpoint or a
// checkpoint.dir, whose newest complete checkpoint is shown.
#include <cstdio>
#include <filesystem>

#include "engine/checkpoint/checkpointer.hpp"
#include "engine/cli/commands.hpp"
#include "parallel/mpi_world.hpp"

namespace loom::cli {

int cmd_ckpt_inspect(const std::string& dir, int* argc, char*** argv) {
  parallel::MpiWorld world(argc, argv);  // parallel HDF5 needs MPI, even on one rank
  try {
    std::string target = dir;
    std::error_code ec;
    if (!std::filesystem::exists(dir, ec)) throw std::runtime_error(dir + ": no such file or directory");
    if (!std::filesystem::exists(std::filesystem::path(dir) / "manifest.json")) {
      auto all = list_checkpoints(dir);
      if (all.empty()) throw std::runtime_error(dir + ": neither a checkpoint nor a directory holding complete ones");
      target = all.back();
    }
    std::fputs(inspect_checkpoint(target).c_str(), stdout);
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "loom ckpt: error: %s\n", e.what());
    return 2;
  }
}

}  // namespace loom::cli
