#pragma once
// `loom plan`'s host staging on one pipeline stage: the host buffers that come and go around the
// steps (the initial parameters going in, a checkpoint's snapshot, ZeRO-1's re-bucketing).
#include "engine/config/recipe.hpp"
#include "engine/model/gpt_shape.hpp"
#include "engine/model/param_table.hpp"

namespace loom {

// Bytes, the largest of:
// - the initial parameters going in once the optimizer exists, a tensor at a time
//   (Trainer::build_model: one tensor's host buffer, and with model.init_from the source's fp32
//   copy of the global tensor being read), less `step_transients`: what the first step adds after
//   they are gone (ZeRO-2/3's per-unit buffers, the CPU's scratch);
// - with checkpoint.dir, a save's: its snapshot (kept between saves: the slices of parameters and
//   both moments this rank writes, about 12 bytes per parameter over dp, Checkpointer::Snapshot)
//   and, while it is taken, the piece passing by (16 MB, or a bucket where ZeRO shards the state,
//   at any dp) or, while it is written, the MPI-IO aggregator's collective buffer (Open MPI 4.1's
//   OMPIO, io_ompio_bytes_per_agg: 32 MiB, in mca_fcoll_vulcan_file_write_all under heaptrack;
//   rank 0 is an aggregator);
// - ZeRO-1 with parallel.bucket_mb auto at dp > 1: the re-bucketing after the second step holds
//   the old optimizer state beside the new one while the moments pass over a bucket at a time
//   (DistributedOptimizer::resize_buckets), over a snapshot already taken.
// `table`: tp rank 0's of stage `stage`. On GPUs this is host memory, not device memory (and the
// re-bucketing's is device memory, not counted there). LoRA's frozen base goes in a tensor at a
// time before the optimizer exists: plan.cpp's `loading`.
double host_staging_bytes(const Recipe& r, const GptShape& shape, const ParamTable& table, int stage, int dp,
                          double step_transients);

}  // namespace loom
