#include "engine/plan/host_staging.hpp"

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "engine/checkpoint/checkpoint_layout.hpp"
#include "engine/checkpoint/slice_plan.hpp"
#include "engine/pretrained/load_pretrained.hpp"
#include "parallel/bucket_sizing.hpp"
#include "parallel/grad_buckets.hpp"

namespace loom {
namespace {

// Open MPI 4.1's OMPIO collective buffer per aggregator (io_ompio_bytes_per_agg's default).
constexpr double kMpiIoAggregatorBytes = double(size_t(32) << 20);

}  // namespace

double host_staging_bytes(const Recipe& r, const GptShape& shape, const ParamTable& table, int stage, int dp,
                          double step_transients) {
  const double P = double(table.total());
  const int zero = r.parallel.zero;
  const double owned = zero >= 1 ? P / dp : P;
  size_t largest_tensor = 0;
  for (const ParamInfo& q : table.params()) largest_tensor = std::max(largest_tensor, q.numel);
  const double read_trainable = r.model.init_from.empty() ? 0 : double(pretrained_read_bytes(table));
  double staging = std::max(0.0, 4.0 * double(largest_tensor) + read_trainable - step_transients);
  const bool auto_buckets = r.parallel.bucket_mb == 0;
  const double bucket = double(parallel::bucket_mb_to_elems(auto_buckets ? parallel::BucketSizing{}.max_mb
                                                                         : r.parallel.bucket_mb));
  const double piece = std::min(P, std::max(double(parallel::kVisitPieceElems), zero >= 1 ? bucket : 0.0));
  double snapshot = 0;
  if (!r.checkpoint.dir.empty()) {
    const std::vector<GlobalTensor> tensors = global_tensors(shape);
    std::vector<std::string> names;
    for (const GlobalTensor& g : tensors) names.push_back(g.name);
    const std::vector<uint64_t> bytes = dataset_bytes(tensors);
    double file_bytes = 0;
    for (uint64_t b : bytes) file_bytes += double(b);
    snapshot = 4.0 * double(most_elems_written(names, bytes, table, 0, stage, dp));
    staging = std::max(staging, snapshot + std::max(4.0 * piece, std::min(file_bytes, kMpiIoAggregatorBytes)));
  }
  if (zero == 1 && dp > 1 && auto_buckets && r.parallel.overlap_grad_reduce)
    staging = std::max(staging, snapshot + owned * (r.optim.offload == "cpu" ? 16 : 8) + 4.0 * piece);
  return staging;
}

}  // namespace loom
