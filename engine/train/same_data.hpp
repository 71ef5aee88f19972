#pragma once
// Every rank must read the same tokens where they stand for one dataset: data.train (a node's
// stale copy would draw other samples at the same positions), data.val (val_loss would average
// different tokens) and `loom eval --data` (its loss likewise). A node-local copy that differs
// is refused by name, from the fingerprint each rank computes while validating its copy.
#include <string>

#include "engine/data/token_dataset.hpp"
#include "parallel/mpi_communicator.hpp"

namespace loom {

// Collective over `group`: "" where this rank's fingerprint equals rank 0's; else this rank's
// error, naming `what` ("data.train=PATH"), both fingerprints and `kind` ("training data"). The
// caller makes the ranks agree on it (parallel::agreed) before its next collective call.
std::string data_differs_from_rank0(parallel::MpiCommunicator& group, const std::string& what,
                                    const DataFingerprint& mine, const std::string& kind);

}  // namespace loom
