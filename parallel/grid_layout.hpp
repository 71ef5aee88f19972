#pragma once
// The 3-D process grid, as arithmetic only (no MPI, so it is unit-testable anywhere).
// Megatron order: tensor-parallel ranks are adjacent (tp varies fastest), then dp, then pp:
//   rank = pp_rank * (dp * tp) + dp_rank * tp + tp_rank
// so a TP group is tp consecutive ranks (one node's GPUs when tp <= GPUs per node), a DP group
// strides by tp, and a pipeline spans the whole job in strides of dp * tp.
#include <vector>

namespace loom::parallel {

struct GridLayout {
  int tp = 1, dp = 1, pp = 1;

  int world() const { return tp * dp * pp; }
  struct Coord {
    int tp, dp, pp;
  };
  Coord coord(int rank) const { return {rank % tp, (rank / tp) % dp, rank / (tp * dp)}; }
  int rank_of(Coord c) const { return c.pp * (dp * tp) + c.dp * tp + c.tp; }

  // World ranks of `rank`'s groups, in group-rank order.
  std::vector<int> tp_group(int rank) const;
  std::vector<int> dp_group(int rank) const;
  std::vector<int> pp_group(int rank) const;
  // Pipeline neighbours, or -1 at the ends.
  int pp_prev(int rank) const;
  int pp_next(int rank) const;
};

}  // namespace loom::parallel
