// The tp x dp x pp rank arithmetic (Megatron order: tp fastest, then dp, then pp).
#include <catch2/catch.hpp>

#include <set>

#include "parallel/grid_layout.hpp"

using loom::parallel::GridLayout;

TEST_CASE("2 nodes x 4 GPUs as tp=2, dp=2, pp=2: the worked example of docs/parallelism.md") {
  GridLayout g{2, 2, 2};
  CHECK(g.world() == 8);
  // Rank 5 = pp 1, dp 0, tp 1.
  auto c = g.coord(5);
  CHECK(c.tp == 1);
  CHECK(c.dp == 0);
  CHECK(c.pp == 1);
  CHECK(g.tp_group(5) == std::vector<int>{4, 5});
  CHECK(g.dp_group(5) == std::vector<int>{5, 7});
  CHECK(g.pp_group(5) == std::vector<int>{1, 5});
  CHECK(g.pp_prev(5) == 1);
  CHECK(g.pp_next(5) == -1);
  CHECK(g.pp_prev(1) == -1);
  CHECK(g.pp_next(1) == 5);
}

TEST_CASE("every factorisation partitions the world into groups consistently") {
  for (int tp : {1, 2, 4})
    for (int dp : {1, 2, 3})
      for (int pp : {1, 2, 4}) {
        GridLayout g{tp, dp, pp};
        std::set<std::vector<int>> tps, dps, pps;
        for (int r = 0; r < g.world(); ++r) {
          REQUIRE(g.rank_of(g.coord(r)) == r);
          auto t = g.tp_group(r), d = g.dp_group(r), p = g.pp_group(r);
          REQUIRE(t.size() == size_t(tp));
          REQUIRE(d.size() == size_t(dp));
          REQUIRE(p.size() == size_t(pp));
          // A rank sits in its own groups at its own coordinate.
          REQUIRE(t[size_t(g.coord(r).tp)] == r);
          REQUIRE(d[size_t(g.coord(r).dp)] == r);
          REQUIRE(p[size_t(g.coord(r).pp)] == r);
          // TP groups are consecutive ranks.
          for (size_t i = 1; i < t.size(); ++i) REQUIRE(t[i] == t[0] + int(i));
          tps.insert(t);
          dps.insert(d);
          pps.insert(p);
        }
        CHECK(tps.size() == size_t(dp * pp));
        CHECK(dps.size() == size_t(tp * pp));
        CHECK(pps.size() == size_t(tp * dp));
      }
}
