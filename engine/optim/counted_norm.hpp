#pragma once
// The squared L2 norm of gradients as grad_norm counts them: every element of the model once,
// so tied copies are skipped and a tensor replicated over tp is counted on tp rank 0 only (the
// callers then sum over tp and pp). Shared by the whole-buffer optimizer (zero 0/1) and
// ZeRO-2/3's per-unit buffers, for the gradient noise scale's small batch.
#include <algorithm>
#include <cstddef>

#include "engine/model/param_table.hpp"
#include "kernels/backend.hpp"

namespace loom {

// Flat elements [begin, end) of `table`; `grads` holds the gradients of flat offsets from
// `grads_begin` on (the whole buffer: 0; a unit's buffer: the unit's begin). One sum_squares
// per contiguous run of counted elements: each returns a host scalar (on CUDA a
// synchronisation, which per tensor would stall backward's launches).
inline double counted_sum_squares(Backend& be, const ParamTable& table, const float* grads, size_t grads_begin,
                                  size_t begin, size_t end, bool tp_lead) {
  double sum = 0;
  size_t run_lo = 0, run_hi = 0;
  auto flush = [&] {
    if (run_hi > run_lo) sum += be.sum_squares(grads + (run_lo - grads_begin), run_hi - run_lo);
  };
  for (const ParamInfo& p : table.params()) {
    const size_t lo = std::max(begin, p.offset), hi = std::min(end, p.offset + p.numel);
    if (lo >= hi || p.tied_copy || (!tp_lead && p.split == TpSplit::Replicated)) continue;
    if (lo != run_hi) {
      flush();
      run_lo = lo;
    }
    run_hi = hi;
  }
  flush();
  return sum;
}

}  // namespace loom
