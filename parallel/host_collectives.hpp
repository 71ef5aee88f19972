#pragma once
// The few collectives on host bytes and strings that checkpoints and the run's reports need
// (messages, paths, checksums, flags), over an MpiCommunicator's group. The float collectives of
// training are Communicator's (communicator.hpp); agreeing on an error is agree_on_error's
// (mpi_world.hpp, also over an MpiCommunicator).
//
// These are not watched by the Watchdog (parallel.timeout_s): their callers legitimately wait
// long in them (the other ranks while rank 0 fsyncs and checksums a checkpoint of many GB).
// Every member of the group must make the same calls in the same order; a failed MPI call
// throws std::runtime_error. Safe to use from a background thread over a communicator of its own
// (MpiWorld asks for MPI_THREAD_MULTIPLE).
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "parallel/mpi_communicator.hpp"
#include "parallel/mpi_world.hpp"

namespace loom::parallel {

// `s` on rank `root`, returned on every rank (other ranks' `s` is ignored).
std::string broadcast_string(MpiCommunicator& comm, const std::string& s, int root = 0);
// `list` on rank `root` (its length and every string), returned on every rank.
std::vector<std::string> broadcast_strings(MpiCommunicator& comm, const std::vector<std::string>& list, int root = 0);
// `v` on rank `root`, returned on every rank.
int64_t broadcast_int(MpiCommunicator& comm, int64_t v, int root = 0);

// The smallest of the members' `v`.
int all_reduce_min(MpiCommunicator& comm, int v);
// Waits for every member (unwatched, unlike MpiCommunicator::barrier: the others may wait long
// for rank 0 here).
void barrier_unwatched(MpiCommunicator& comm);
// True if `v` is true on every member.
inline bool all_true(MpiCommunicator& comm, bool v) { return all_reduce_min(comm, v ? 1 : 0) != 0; }

// Every member's `s`, in rank order, on every rank (e.g. every rank's host name). Also over a
// plain MPI_Comm, for start-up before any MpiCommunicator exists.
std::vector<std::string> all_gather_strings(MpiCommunicator& comm, const std::string& s);
std::vector<std::string> all_gather_strings(MPI_Comm comm, const std::string& s);

// Every member's `n` bytes at `data`, concatenated in rank order, on rank `root`; `counts` (if
// given) gets each member's byte count there. Other ranks get an empty vector.
std::vector<char> gather_bytes(MpiCommunicator& comm, const void* data, size_t n, int root = 0,
                               std::vector<size_t>* counts = nullptr);

// The first line of the MPI library's version string ("Open MPI v4.1.4, package: ...").
std::string mpi_library_version();

}  // namespace loom::parallel
