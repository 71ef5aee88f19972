// Who writes which slice of a checkpoint (engine/checkpoint/slice_plan.hpp): the datasets dealt
// out over the dp replicas, exactly one writer for every stored element under every layout of up
// to 8 ranks, tp slices that tile each global tensor, and the tied embedding written once. No MPI,
// no HDF5: the parameter tables of every rank of a layout are built here side by side.
#include <catch2/catch.hpp>

#include <algorithm>
#include <numeric>
#include <string>
#include <vector>

#include "engine/checkpoint/checkpoint_layout.hpp"
#include "engine/checkpoint/slice_plan.hpp"
#include "engine/model/param_table.hpp"
#include "parallel/grid_layout.hpp"

using namespace loom;
using loom::parallel::GridLayout;

namespace {

// The tiny recipe's shape, narrower: vocabulary 257 (Vp 384: at tp = 4 the last rank's rows are
// all padding), 4 heads, 4 layers.
GptShape tiny() { return GptShape::make(4, 4, 32, 257, 16); }

// Pipeline stage `s` of a split of the layers into `layers` blocks each.
StageSpec stage_of(const std::vector<int>& layers, int s) {
  const int first = std::accumulate(layers.begin(), layers.begin() + s, 0);
  return StageSpec{first, layers[size_t(s)], s == 0, s == int(layers.size()) - 1};
}

std::vector<int> even_split(int n_layer, int pp) { return std::vector<int>(size_t(pp), n_layer / pp); }

int64_t numel(const std::vector<int64_t>& shape) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

// Calls f(global row, global col, local index) for every element of `s` in local order.
template <class F>
void for_each_element(const TensorSlice& s, F f) {
  int64_t local = 0;
  for (const auto& [first, count] : s.row_runs)
    for (int64_t r = first; r < first + count; ++r)
      for (int64_t c = s.col_begin; c < s.col_begin + s.cols; ++c) f(r, c, local++);
}

}  // namespace

TEST_CASE("spread_over_dp: every dataset to one dp rank, largest first to the least loaded") {
  const std::vector<uint64_t> bytes = dataset_bytes(global_tensors(tiny()));
  const uint64_t largest = *std::max_element(bytes.begin(), bytes.end());
  for (int dp = 1; dp <= 8; ++dp) {
    INFO("dp = " << dp);
    const std::vector<int> owner = spread_over_dp(bytes, dp);
    REQUIRE(owner.size() == bytes.size());
    CHECK(spread_over_dp(bytes, dp) == owner);  // deterministic: every rank computes the same
    std::vector<uint64_t> load(size_t(dp), 0);
    for (size_t d = 0; d < bytes.size(); ++d) {
      REQUIRE(owner[d] >= 0);
      REQUIRE(owner[d] < dp);
      load[size_t(owner[d])] += bytes[d];
    }
    // Greedy to the least loaded: no replica carries more than one dataset beyond another.
    const auto [lo, hi] = std::minmax_element(load.begin(), load.end());
    CHECK(*hi - *lo <= largest);
    // Enough datasets for all: every replica writes something.
    CHECK(*lo > 0);
  }
  CHECK(spread_over_dp(bytes, 1) == std::vector<int>(bytes.size(), 0));
}

TEST_CASE("spread_over_dp: ties go to the lower dp rank and the earlier dataset") {
  CHECK(spread_over_dp({4, 4, 4, 4}, 2) == std::vector<int>{0, 1, 0, 1});
  CHECK(spread_over_dp({1, 8, 2, 8}, 2) == std::vector<int>{1, 0, 0, 1});
  CHECK(spread_over_dp({5, 3, 2}, 2) == std::vector<int>{0, 1, 1});
  CHECK(spread_over_dp({7}, 4) == std::vector<int>{0});
  CHECK(spread_over_dp({}, 3).empty());
}

TEST_CASE("slice_of: the rank's local layout in global coordinates") {
  const GptShape s = tiny();
  for (int tp : {1, 2, 4})
    for (int r = 0; r < tp; ++r) {
      const ParamTable table = gpt_param_table(s, r, tp);
      for (const ParamInfo& p : table.params()) {
        INFO(p.name << " tp rank " << r << " of " << tp);
        const TensorSlice sl = slice_of(p);
        CHECK(sl.cols == p.cols());
        int64_t n = 0;
        bool same = true;
        for_each_element(sl, [&](int64_t row, int64_t col, int64_t i) {
          same = same && p.global_index(size_t(i)) == row * p.global_cols() + col;
          ++n;
        });
        CHECK(same);
        CHECK(n == int64_t(p.numel));
      }
    }
}

TEST_CASE("the tp slices of each tensor cover the global tensor exactly once") {
  const GptShape s = tiny();
  for (int tp : {1, 2, 4}) {
    std::vector<ParamTable> tables;
    for (int r = 0; r < tp; ++r) tables.push_back(gpt_param_table(s, r, tp));
    for (size_t t = 0; t < tables[0].params().size(); ++t) {
      const ParamInfo& p0 = tables[0].params()[t];
      INFO(p0.name << " at tp = " << tp);
      if (p0.split == TpSplit::Replicated) {  // every rank holds all of it
        for (const ParamTable& table : tables) {
          const ParamInfo& p = table.params()[t];
          CHECK(p.shape == p.global_shape);
          CHECK(p.col_begin == 0);
          CHECK(p.row_runs == std::vector<std::pair<int64_t, int64_t>>{{0, p.global_shape[0]}});
        }
        continue;
      }
      std::vector<int> hits(size_t(numel(p0.global_shape)), 0);
      const int64_t gcols = p0.global_cols();
      bool inside = true;
      for (const ParamTable& table : tables) {
        const ParamInfo& p = table.params()[t];
        REQUIRE(p.name == p0.name);
        for_each_element(slice_of(p), [&](int64_t row, int64_t col, int64_t) {
          const bool in = row >= 0 && row < p.global_shape[0] && col >= 0 && col < gcols;
          inside = inside && in;
          if (in) ++hits[size_t(row * gcols + col)];
        });
      }
      CHECK(inside);
      CHECK(std::all_of(hits.begin(), hits.end(), [](int h) { return h == 1; }));
    }
  }
}

TEST_CASE("every stored element of every dataset has exactly one writer under every layout of up to 8 ranks") {
  const GptShape s = tiny();
  const std::vector<GlobalTensor> tensors = global_tensors(s);
  const std::vector<uint64_t> bytes = dataset_bytes(tensors);
  int layouts = 0;
  for (int tp : {1, 2, 4})
    for (int pp : {1, 2, 4})
      for (int dp = 1; tp * pp * dp <= 8; ++dp) {
        std::vector<std::vector<int>> splits = {even_split(s.n_layer, pp)};
        if (pp == 2) splits.push_back({1, 3});  // uneven (parallel.pp_layers)
        for (const std::vector<int>& layers : splits) {
          const GridLayout grid{tp, dp, pp};
          INFO("tp=" << tp << " pp=" << pp << " dp=" << dp << " first stage layers " << layers[0]);
          ++layouts;
          const std::vector<int> owner_dp = spread_over_dp(bytes, dp);
          // hits[dataset][element]: how many ranks write it.
          std::vector<std::vector<int>> hits;
          for (const GlobalTensor& g : tensors)
            for (int gi = 0; gi < 3; ++gi) hits.emplace_back(size_t(numel(g.shape)), 0);
          std::vector<int> holders(tensors.size(), 0);
          for (int rank = 0; rank < grid.world(); ++rank) {
            const GridLayout::Coord c = grid.coord(rank);
            const ParamTable table = gpt_param_table(s, c.tp, tp, stage_of(layers, c.pp));
            for (size_t t = 0; t < tensors.size(); ++t) {
              const ParamInfo* p = table.find_if_held(tensors[t].name);
              if (!p) continue;
              ++holders[t];
              const int64_t stored_rows = tensors[t].shape[0];
              const int64_t gcols = tensors[t].shape.size() > 1 ? tensors[t].shape[1] : 1;
              for (int gi = 0; gi < 3; ++gi) {
                const size_t d = 3 * t + size_t(gi);
                if (!canonical_holder(*p, c, owner_dp[d])) continue;
                CHECK(c.dp == owner_dp[d]);
                CHECK(!p->tied_copy);
                if (p->split == TpSplit::Replicated) CHECK(c.tp == 0);
                for_each_element(slice_of(*p), [&](int64_t row, int64_t col, int64_t) {
                  if (row < stored_rows) ++hits[d][size_t(row * gcols + col)];  // padding rows: not stored
                });
              }
            }
          }
          for (size_t t = 0; t < tensors.size(); ++t) {
            INFO(tensors[t].name);
            CHECK(holders[t] > 0);  // some stage holds every tensor
            for (int gi = 0; gi < 3; ++gi) {
              const std::vector<int>& h = hits[3 * t + size_t(gi)];
              CHECK(std::all_of(h.begin(), h.end(), [](int x) { return x == 1; }));
            }
          }
        }
      }
  CHECK(layouts == 31);  // every (tp, pp, dp), tp and pp in {1, 2, 4}, of at most 8 ranks; pp = 2 split two ways
}

// A save's snapshot keeps the slices datasets_written names: the canonical holders', every
// dataset in full once over the grid; loom plan's most_elems_written is the largest dp rank's.
TEST_CASE("datasets_written names the canonical holders' slices and most_elems_written the largest rank's") {
  const GptShape s = tiny();
  const std::vector<GlobalTensor> tensors = global_tensors(s);
  const std::vector<uint64_t> bytes = dataset_bytes(tensors);
  std::vector<std::string> names;
  for (const GlobalTensor& g : tensors) names.push_back(g.name);
  for (int tp : {1, 2})
    for (int pp : {1, 2})
      for (int dp : {1, 2, 3}) {
        const std::vector<int> layers = even_split(s.n_layer, pp);
        const std::vector<int> owner_dp = spread_over_dp(bytes, dp);
        INFO("tp=" << tp << " pp=" << pp << " dp=" << dp);
        std::vector<int> writers(3 * tensors.size(), 0);
        for (int c_tp = 0; c_tp < tp; ++c_tp)
          for (int c_pp = 0; c_pp < pp; ++c_pp) {
            const ParamTable table = gpt_param_table(s, c_tp, tp, stage_of(layers, c_pp));
            size_t most = 0;
            for (int c_dp = 0; c_dp < dp; ++c_dp) {
              const GridLayout::Coord c{c_tp, c_dp, c_pp};
              const std::vector<const ParamInfo*> w = datasets_written(names, table, c, owner_dp);
              REQUIRE(w.size() == 3 * tensors.size());
              size_t elems = 0;
              for (size_t d = 0; d < w.size(); ++d) {
                const ParamInfo* p = table.find_if_held(names[d / 3]);
                CHECK(w[d] == (p && canonical_holder(*p, c, owner_dp[d]) ? p : nullptr));
                if (w[d]) {
                  ++writers[d];
                  elems += w[d]->numel;
                }
              }
              most = std::max(most, elems);
            }
            CHECK(most_elems_written(names, bytes, table, c_tp, c_pp, dp) == most);
            CHECK(most > 0);
          }
        // Each dataset: one writer per tp slice of a split tensor, one for a replicated one.
        for (size_t d = 0; d < writers.size(); ++d) {
          INFO(names[d / 3]);
          CHECK(writers[d] >= 1);
          CHECK(writers[d] <= tp);
        }
      }
}

TEST_CASE("the tied embedding: the first stage's wte is written, the last stage's copy never") {
  const GptShape s = tiny();
  const GridLayout grid{2, 2, 2};
  const std::vector<uint64_t> bytes = dataset_bytes(global_tensors(s));
  const std::vector<int> owner_dp = spread_over_dp(bytes, grid.dp);
  int first_writers = 0;
  for (int rank = 0; rank < grid.world(); ++rank) {
    const GridLayout::Coord c = grid.coord(rank);
    const ParamTable table = gpt_param_table(s, c.tp, grid.tp, stage_of({2, 2}, c.pp));
    const ParamInfo& wte = table.find("wte");
    CHECK(wte.tied);
    CHECK(wte.tied_copy == (c.pp == 1));
    for (int gi = 0; gi < 3; ++gi) {
      const bool writes = canonical_holder(wte, c, owner_dp[size_t(gi)]);  // wte is tensor 0
      if (c.pp == 1) CHECK_FALSE(writes);
      first_writers += writes;
    }
  }
  CHECK(first_writers == 3 * grid.tp);  // each dataset: one dp rank, every tp slice
  // One stage holding both ends: one copy, not tied, written.
  const ParamTable whole = gpt_param_table(s);
  CHECK_FALSE(whole.find("wte").tied_copy);
  CHECK(canonical_holder(whole.find("wte"), GridLayout::Coord{0, 0, 0}, 0));
}
