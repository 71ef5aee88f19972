#include "engine/checkpoint/slice_plan.hpp"

#include <algorithm>
#include <cstddef>
#include <numeric>

namespace loom {

TensorSlice slice_of(const ParamInfo& p) { return TensorSlice{p.row_runs, p.col_begin, p.cols()}; }

std::vector<int> spread_over_dp(const std::vector<uint64_t>& bytes, int dp) {
  std::vector<size_t> order(bytes.size());
  std::iota(order.begin(), order.end(), size_t(0));
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return bytes[a] > bytes[b]; });
  std::vector<uint64_t> load(size_t(dp), 0);
  std::vector<int> owner(bytes.size(), 0);
  for (size_t d : order) {
    const size_t least = size_t(std::min_element(load.begin(), load.end()) - load.begin());
    owner[d] = int(least);
    load[least] += bytes[d];
  }
  return owner;
}

bool canonical_holder(const ParamInfo& p, const parallel::GridLayout::Coord& coord, int owner_dp) {
  return coord.dp == owner_dp && (p.split != TpSplit::Replicated || coord.tp == 0) && !p.tied_copy;
}

std::vector<const ParamInfo*> datasets_written(const std::vector<std::string>& tensors, const ParamTable& table,
                                               const parallel::GridLayout::Coord& coord,
                                               const std::vector<int>& owner_dp) {
  std::vector<const ParamInfo*> out(3 * tensors.size(), nullptr);
  for (size_t t = 0; t < tensors.size(); ++t) {
    const ParamInfo* mine = table.find_if_held(tensors[t]);
    for (size_t g = 0; g < 3 && mine; ++g)
      if (canonical_holder(*mine, coord, owner_dp[3 * t + g])) out[3 * t + g] = mine;
  }
  return out;
}

size_t most_elems_written(const std::vector<std::string>& tensors, const std::vector<uint64_t>& bytes,
                          const ParamTable& table, int tp_rank, int pp_rank, int dp) {
  const std::vector<int> owner_dp = spread_over_dp(bytes, dp);
  size_t most = 0;
  for (int d = 0; d < dp; ++d) {
    size_t n = 0;
    for (const ParamInfo* p : datasets_written(tensors, table, {tp_rank, d, pp_rank}, owner_dp))
      if (p) n += p->numel;
    most = std::max(most, n);
  }
  return most;
}

}  // namespace loom
