#pragma once
#include <memory>
#include <stdexcept>
#include <string>

#include "kernels/backend.hpp"

namespace loom {

struct BackendError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// "cpu" or "cuda". Throws BackendError naming what is missing (no device, not compiled in).
std::unique_ptr<Backend> make_backend(const std::string& name);

// The CUDA device a rank drives: its local rank on the node (from the launcher's environment:
// Open MPI's OMPI_COMM_WORLD_LOCAL_RANK, Slurm's SLURM_LOCALID) modulo the devices visible.
int cuda_device_for_this_rank();

// One line for `loom --version`: which backends this build and this machine can run.
std::string backend_availability();

}  // namespace loom
