#pragma once
// Who writes what of a checkpoint, as arithmetic on the parameter table and the process grid (no
// MPI, no HDF5: unit-tested on its own). A rank's slice of a global tensor is where its table
// puts it; each dataset (a tensor's params/, adam_m/ or adam_v/) is written, and on load
// checksummed, by exactly one rank per element: the canonical holder. docs/checkpoints.md.
#include <cstdint>
#include <string>
#include <vector>

#include "engine/checkpoint/h5_tensor_file.hpp"
#include "engine/model/param_table.hpp"
#include "parallel/grid_layout.hpp"

namespace loom {

// Where this rank's part of tensor `p` lies in the global tensor (its row runs and columns).
TensorSlice slice_of(const ParamInfo& p);

// Which data-parallel rank writes (and, on load, checksums) each dataset of `bytes` bytes (in
// dataset order). Every dp replica has the same slices to write (under ZeRO, a save gathers what
// it writes over dp, a bucket at a time), so the datasets are dealt out among them, largest first to the least loaded (ties: the lower dp
// rank, then the earlier dataset): a job's replicas write at once (on a cluster, from as many
// nodes) instead of leaving it all to dp rank 0. The same on every rank.
std::vector<int> spread_over_dp(const std::vector<uint64_t>& bytes, int dp);

// Whether the rank at `coord` is the one that writes (and, on load, checksums) its slice of a
// dataset of tensor `p` that spread_over_dp gave to dp rank `owner_dp`: that dp rank; tp rank 0
// for a replicated tensor; never a tied copy (the last stage's wte: the first stage's is
// identical and is the one written).
bool canonical_holder(const ParamInfo& p, const parallel::GridLayout::Coord& coord, int owner_dp);

// Per dataset of the global tensors named `tensors` (dataset 3t + g: params/, adam_m/ and adam_v/
// of tensor t), the parameter of `table` (the rank at `coord`'s) whose slice that rank writes, or
// null where it writes none of the dataset (`owner_dp`: spread_over_dp's, per dataset). A save's
// snapshot keeps these slices only.
std::vector<const ParamInfo*> datasets_written(const std::vector<std::string>& tensors, const ParamTable& table,
                                               const parallel::GridLayout::Coord& coord,
                                               const std::vector<int>& owner_dp);
// The most floats those slices come to on any dp rank of (tp_rank, pp_rank), whose table is
// `table` (`bytes`: dataset_bytes of the tensors): a save's snapshot (loom plan).
size_t most_elems_written(const std::vector<std::string>& tensors, const std::vector<uint64_t>& bytes,
                          const ParamTable& table, int tp_rank, int pp_rank, int dp);

}  // namespace loom
