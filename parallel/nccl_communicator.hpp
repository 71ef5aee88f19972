#pragma once
// Communicator over NCCL for device buffers, bootstrapped by broadcasting an ncclUniqueId over
// the matching MPI communicator. Collectives run on the communicator's own CUDA stream; a
// Request records an event on it, and wait() makes the caller's stream (or the host) wait.
// Compiled whenever the CUDA toolkit and NCCL are found; exercised by the GPU issue.
#include <mpi.h>

#include <memory>

#include "parallel/communicator.hpp"

namespace loom::parallel {

// Throws std::runtime_error if this build has no NCCL. `device` is the CUDA device of this rank.
// `compute_stream` (a cudaStream_t, may be null): every operation first waits for the work
// already queued there (an event), so a collective never reads a buffer a kernel is still
// writing.
std::unique_ptr<Communicator> make_nccl_communicator(MPI_Comm comm, int device, void* compute_stream = nullptr);

}  // namespace loom::parallel
