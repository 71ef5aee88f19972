#pragma once
// Out of memory, said before training and in words: the per-rank memory `loom plan` predicts
// (from the same sizing functions the model allocates with) against what this node has
// available (memory_room.hpp), and a message for an allocation that failed anyway.
#include <string>

#include "engine/config/recipe.hpp"
#include "engine/util/memory_room.hpp"

namespace loom {

// The plan's prediction for one rank of this recipe on the CPU, in MB (0 if it cannot predict).
double predicted_rank_mb(const Recipe& r);

// Throws std::runtime_error when `ranks_on_node` ranks of the prediction exceed `room`, the
// memory this process may still take (memory_room(): the node's MemAvailable, or less where its
// memory cgroup, a Slurm job's --mem, leaves less; read by every rank before any allocates): the
// message gives both figures, the prediction's parts and what to change. No-op where either
// figure is unknown.
void check_host_memory_fits(const Recipe& r, int ranks_on_node, const MemoryRoom& room);

// For a std::bad_alloc caught while allocating `what` ("the model (parameters, ...)", "the
// optimizer (gradient reduction buffers and state)"): `cause` is the exception's own account
// where it has one (the CUDA backend's: the size asked for, where, and the GPU's free memory;
// empty for a host allocation's bare std::bad_alloc), `gpu` says whose memory ran out (the plan's
// prediction is then the GPU's).
std::string allocation_failure_message(const Recipe& r, const std::string& what, int rank, const std::string& cause,
                                       bool gpu);

}  // namespace loom
