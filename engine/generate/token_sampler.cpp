#include "engine/generate/token_sampler.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <numeric>
#include <stdexcept>
#include <string>
#include <vector>

#include "engine/util/splitmix64.hpp"

namespace loom {

TokenSampler::TokenSampler(const SamplingConfig& c) : c_(c) {
  auto num = [](double v) {
    char b[32];
    std::snprintf(b, sizeof b, "%g", v);
    return std::string(b);
  };
  if (!(c.temperature >= 0))
    throw std::invalid_argument("temperature (--temperature) must be >= 0 (0: greedy), not " + num(c.temperature));
  if (c.top_k < 0)
    throw std::invalid_argument("top_k (--top-k) must be >= 0 (0: no limit), not " + std::to_string(c.top_k));
  if (!(c.top_p > 0 && c.top_p <= 1))
    throw std::invalid_argument("top_p (--top-p) must be in (0, 1], not " + num(c.top_p));
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
