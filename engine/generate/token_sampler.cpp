#include "engine/generate/token_sampler.hpp"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <stdexcept>
#include <vector>

#include "engine/util/splitmix64.hpp"

namespace loom {

TokenSampler::TokenSampler(const SamplingConfig& c) : c_(c) {
  if (!(c.temperature >= 0)) throw std::invalid_argument("temperature must be >= 0 (0: greedy)");
  if (c.top_k < 0) throw std::invalid_argument("top_k must be >= 0 (0: no limit)");
  if (!(c.top_p > 0 && c.top_p <= 1)) throw std::invalid_argument("top_p must be in (0, 1]");
}

int TokenSampler::next(const float* logits, int V) {
  if (c_.temperature == 0) return int(std::max_element(logits, logits + V) - logits);
  // Candidates by probability, highest first (ties: the lower id), in double.
  std::vector<int> ids(size_t(V), 0);
  std::iota(ids.begin(), ids.end(), 0);
  const size_t keep_k = c_.top_k > 0 ? std::min<size_t>(size_t(c_.top_k), ids.size()) : ids.size();
  auto higher = [&](int a, int b) { return logits[a] > logits[b] || (logits[a] == logits[b] && a < b); };
  if (keep_k < ids.size()) {
    std::partial_sort(ids.begin(), ids.begin() + std::ptrdiff_t(keep_k), ids.end(), higher);
    ids.resize(keep_k);
  } else {
    std::sort(ids.begin(), ids.end(), higher);
  }
  const double top = logits[ids[0]];
  std::vector<double> p(ids.size());
  double sum = 0;
  for (size_t i = 0; i < ids.size(); ++i) sum += (p[i] = std::exp((double(logits[ids[i]]) - top) / c_.temperature));
  // Nucleus: the shortest prefix whose probability reaches top_p.
  size_t n = ids.size();
  if (c_.top_p < 1) {
    double cum = 0;
    for (size_t i = 0; i < ids.size(); ++i)
      if ((cum += p[i] / sum) >= c_.top_p) {
        n = i + 1;
        break;
      }
  }
  const double mass = std::accumulate(p.begin(), p.begin() + std::ptrdiff_t(n), 0.0);
  const double u = double(splitmix64(splitmix64(c_.seed) ^ splitmix64(draws_++)) >> 11) * 0x1.0p-53 * mass;
  double cum = 0;
  for (size_t i = 0; i < n; ++i)
    if ((cum += p[i]) > u) return ids[i];
  return ids[n - 1];
}

}  // namespace loom
