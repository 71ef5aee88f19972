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
// `name` ("tp", "dp", ...) names the group in watchdog messages. Waits on NCCL work run inside a
// Watchdog::Scope (parallel.timeout_s) and poll ncclCommGetAsyncError, so a collective whose
// peer died raises NCCL's error instead of waiting for ever; an abort of the job runs
// ncclCommAbort on the communicator first (abort_hooks.hpp).
std::unique_ptr<Communicator> make_nccl_communicator(MPI_Comm comm, int device, void* compute_stream = nullptr,
                                                     const std::string& name = "nccl");

}  // namespace loom::parallel
