#pragma once
#include <memory>
#include <stdexcept>
#include <string>

#include "kernels/backend.hpp"

namespace loom {

struct BackendError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// "cpu" or "cuda"; `device` is the CUDA device to drive (ignored by the CPU backend). Throws
// BackendError naming what is missing (no device, not compiled in), as `key`=name (the recipe key
// or command-line flag that asked for it).
std::unique_ptr<Backend> make_backend(const std::string& name, int device = 0,
                                      const std::string& key = "train.backend");

// The CUDA device a rank drives: its local rank on the node (the caller's to find: kernels/
// knows nothing of MPI or launchers; parallel::ProcessGroups::local_rank()) modulo the devices
// visible. 0 where no device is visible.
int cuda_device_for_local_rank(int local_rank);

// One line for `loom --version`: which backends this build and this machine can run.
std::string backend_availability();

}  // namespace loom
