#pragma once
// Communicator over NCCL for device buffers, bootstrapped by broadcasting an ncclUniqueId over
// the matching MPI communicator. Collectives run on the communicator's own CUDA stream; a
// Request records an event on it, and wait() makes the caller's stream (or the host) wait.
// Compiled whenever the CUDA toolkit and NCCL are found; exercised by the GPU issue.
#include <mpi.h>

#include <array>
#include <memory>
#include <string>

#include "parallel/communicator.hpp"

namespace loom::parallel {

// An ncclUniqueId's bytes (NCCL_UNIQUE_ID_BYTES), kept opaque so that this header needs no nccl.h.
using NcclId = std::array<char, 128>;

// Bootstrapping a communicator has a local half and a collective half, so that a job can agree on
// the half that may fail on one rank alone before any rank waits in the other:
//
// nccl_prepare (local): makes `device` current (cudaSetDevice) and, if `make_id` (the group's
// rank 0), returns a new id (ncclGetUniqueId). It throws on a GPU this process cannot use or an
// NCCL that cannot make an id, so callers agree on it over every rank that will go on to the
// collective half (ProcessGroups::use_nccl agrees once over the world for all its groups).
NcclId nccl_prepare(int device, bool make_id);

// The collective half, over `comm`: broadcasts rank 0's `id` (other ranks' is ignored), then
// ncclCommInitRank. A failure inside ncclCommInitRank cannot be agreed on (the other members wait
// inside theirs), so callers end the job on it rather than report it to an agreement.
// `device` is the CUDA device nccl_prepare made current. `compute_stream` (a cudaStream_t, may be
// null): every operation first waits for the work already queued there (an event), so a
// collective never reads a buffer a kernel is still writing.
// `name` ("tp", "dp", ...) names the group in watchdog messages. Waits on NCCL work run inside a
// Watchdog::Scope (parallel.timeout_s) and poll ncclCommGetAsyncError, so a collective whose
// peer died raises NCCL's error instead of waiting for ever; an abort of the job runs
// ncclCommAbort on the communicator first (abort_hooks.hpp).
std::unique_ptr<Communicator> make_nccl_communicator(MPI_Comm comm, const NcclId& id, int device,
                                                     void* compute_stream, const std::string& name);

// Both halves at once, for callers that end the job on any error (`loom bench comm`).
// Every function here throws std::runtime_error if this build has no NCCL.
std::unique_ptr<Communicator> make_nccl_communicator(MPI_Comm comm, int device, void* compute_stream = nullptr,
                                                     const std::string& name = "nccl");

}  // namespace loom::parallel
