// The gradient noise scale estimator (engine/optim/noise_scale.hpp) against gradients whose
// |G|^2 and tr(S) are known: exact expectations recover them exactly; sampled per-example
// gradients (G plus Gaussian noise of a known diagonal covariance), averaged into a small and a
// big batch the way data-parallel ranks do, converge to them.
#include <catch2/catch.hpp>

#include <cmath>
#include <random>
#include <vector>

#include "engine/optim/noise_scale.hpp"

using loom::NoiseScale;

TEST_CASE("noise scale from exact expectations", "[noise_scale]") {
  const double g2 = 2.5, tr = 400.0;
  NoiseScale ns(0.9);
  REQUIRE(ns.b_simple() < 0);  // nothing measured yet
  for (double bs : {4.0, 8.0, 16.0}) {
    const double bb = 4 * bs;
    ns.add(g2 + tr / bs, bs, g2 + tr / bb, bb);  // E|G_B|^2 = |G|^2 + tr(S) / B
  }
  CHECK(ns.grad_sq() == Approx(g2).epsilon(1e-12));
  CHECK(ns.trace() == Approx(tr).epsilon(1e-12));
  CHECK(ns.b_simple() == Approx(tr / g2).epsilon(1e-12));
  CHECK(ns.count() == 3);
  ns.add(std::nan(""), 4, 1.0, 8);  // a skipped step changes nothing
  CHECK(ns.count() == 3);
  CHECK_THROWS(ns.add(1, 8, 1, 8));
  CHECK_THROWS(NoiseScale(1.0));
  NoiseScale copy;
  copy.restore(ns.state());
  CHECK(copy.b_simple() == ns.b_simple());
  // Resumed with another decay: the averages carry their weight, so more steps of the same
  // expectations still give them back (dividing by 1 - decay^n of the new decay would not).
  NoiseScale other(0.5);
  other.restore(ns.state());
  other.add(g2 + tr / 8, 8, g2 + tr / 32, 32);
  CHECK(other.grad_sq() == Approx(g2).epsilon(1e-12));
  CHECK(other.trace() == Approx(tr).epsilon(1e-12));
  NoiseScale::State old = ns.state();
  old.weight = 0;  // a manifest written before the weight was saved: 1 - decay^n
  NoiseScale legacy(0.9);
  legacy.restore(old);
  CHECK(legacy.grad_sq() == Approx(g2).epsilon(1e-12));
}

TEST_CASE("noise scale of sampled gradients converges to tr(S) over |G|^2", "[noise_scale]") {
  // D dimensions; G fixed; per-example noise with variance sigma_d^2 in dimension d.
  const int D = 64, per_rank = 8, ranks = 4, steps = 4000;
  std::mt19937_64 rng(7);
  std::normal_distribution<double> normal;
  std::vector<double> G(D), sigma(D);
  double g2 = 0, tr = 0;
  for (int d = 0; d < D; ++d) {
    G[d] = 0.3 * normal(rng);
    sigma[d] = 0.5 + 2.0 * double(d) / D;
    g2 += G[d] * G[d];
    tr += sigma[d] * sigma[d];
  }
  NoiseScale ns(0.999);
  std::vector<double> big(D), small(D);
  for (int s = 0; s < steps; ++s) {
    std::fill(big.begin(), big.end(), 0.0);
    double small_sq = 0;  // mean over ranks of |each rank's mean gradient|^2
    for (int r = 0; r < ranks; ++r) {
      std::fill(small.begin(), small.end(), 0.0);
      for (int e = 0; e < per_rank; ++e)
        for (int d = 0; d < D; ++d) small[d] += (G[d] + sigma[d] * normal(rng)) / per_rank;
      double sq = 0;
      for (int d = 0; d < D; ++d) {
        sq += small[d] * small[d];
        big[d] += small[d] / ranks;
      }
      small_sq += sq / ranks;
    }
    double big_sq = 0;
    for (double v : big) big_sq += v * v;
    ns.add(small_sq, per_rank, big_sq, per_rank * ranks);
  }
  INFO("|G|^2 " << g2 << " estimated " << ns.grad_sq() << ", tr(S) " << tr << " estimated " << ns.trace());
  CHECK(ns.trace() == Approx(tr).epsilon(0.05));
  CHECK(ns.grad_sq() == Approx(g2).epsilon(0.15));  // the smaller term: noisier
  CHECK(ns.b_simple() == Approx(tr / g2).epsilon(0.2));
}
