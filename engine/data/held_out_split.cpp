#include "engine/data/held_out_split.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>

namespace loom {

TokenDataset split_off_validation(TokenDataset& d, double fraction) {
  TokenDataset train, val;
  for (TokenDataset* out : {&train, &val}) {
    out->format = d.format;
    out->declared_vocab = d.declared_vocab;
    out->declared_by = d.declared_by;
  }
  char pct[32];
  std::snprintf(pct, sizeof pct, "%g%%", 100 * fraction);
  train.source = d.source;
  val.source = "the last " + std::string(pct) + " of " + d.source;
  std::vector<BlendPart> groups = d.blend;
  if (groups.empty()) groups.push_back({1.0, d.source, 0, d.shards.size()});
  for (const BlendPart& g : groups) {
    size_t total = 0;
    for (size_t i = g.first_shard; i < g.first_shard + g.shard_count; ++i) total += d.shards[i].count;
    const size_t cut = total - size_t(std::llround(double(total) * fraction));
    BlendPart tp{g.weight, g.source, train.shards.size(), 0}, vp{g.weight, g.source, val.shards.size(), 0};
    size_t at = 0;  // the part's tokens before shard i
    for (size_t i = g.first_shard; i < g.first_shard + g.shard_count; ++i) {
      const TokenShard& s = d.shards[i];
      const size_t keep = cut > at ? std::min(s.count, cut - at) : 0;  // the shard's tokens before the cut
      auto view = [&](size_t from, size_t n) {
        TokenShard v = s;
        v.tokens = s.tokens + from * size_t(s.token_bytes);
        v.count = n;
        if (n != s.count) v.name = s.name + " (tokens " + std::to_string(from) + " to " + std::to_string(from + n) + ")";
        return v;
      };
      if (keep > 0) train.shards.push_back(view(0, keep)), ++tp.shard_count;
      if (keep < s.count) val.shards.push_back(view(keep, s.count - keep)), ++vp.shard_count;
      at += s.count;
    }
    if (!d.blend.empty()) {
      train.blend.push_back(tp);
      val.blend.push_back(vp);
    }
  }
  d = std::move(train);
  return val;
}

}  // namespace loom
