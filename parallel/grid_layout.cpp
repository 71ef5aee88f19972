#include "parallel/grid_layout.hpp"

namespace loom::parallel {

std::vector<int> GridLayout::tp_group(int rank) const {
  Coord c = coord(rank);
  std::vector<int> g;
  for (int t = 0; t < tp; ++t) g.push_back(rank_of({t, c.dp, c.pp}));
  return g;
}

std::vector<int> GridLayout::dp_group(int rank) const {
  Coord c = coord(rank);
  std::vector<int> g;
  for (int d = 0; d < dp; ++d) g.push_back(rank_of({c.tp, d, c.pp}));
  return g;
}

std::vector<int> GridLayout::pp_group(int rank) const {
  Coord c = coord(rank);
  std::vector<int> g;
  for (int p = 0; p < pp; ++p) g.push_back(rank_of({c.tp, c.dp, p}));
  return g;
}

int GridLayout::pp_prev(int rank) const {
  Coord c = coord(rank);
  return c.pp == 0 ? -1 : rank_of({c.tp, c.dp, c.pp - 1});
}

int GridLayout::pp_next(int rank) const {
  Coord c = coord(rank);
  return c.pp == pp - 1 ? -1 : rank_of({c.tp, c.dp, c.pp + 1});
}

}  // namespace loom::parallel
