#pragma once
// The gradient noise scale (McCandlish et al. 2018, "An Empirical Model of Large-Batch
// Training", appendix A.1). With G the true gradient and S the per-example covariance, a batch of
// B examples has E|G_B|^2 = |G|^2 + tr(S)/B. Two batch sizes give two equations; each step
// yields the unbiased estimates
//   |G|^2 = (B_big |G_big|^2 - B_small |G_small|^2) / (B_big - B_small)
//   tr(S) = (|G_small|^2 - |G_big|^2) / (1/B_small - 1/B_big)
// from the squared norm of a small-batch gradient (|G_small|^2: averaged over the data-parallel
// ranks' own gradients, before they are reduced, or of one micro-batch on a single rank) and the
// big-batch one (the reduced gradient the optimizer steps on). Both estimates are noisy step by
// step (|G|^2 can come out negative), so each is smoothed with an exponential moving average
// (bias-corrected, like Adam's moments) before the ratio
//   B_simple = tr(S) / |G|^2,
// the batch size (in the unit of B_small and B_big; Loom uses sequences) at which the gradient's
// noise is as large as its signal: much below it, a bigger batch is almost free progress; much
// above it, the extra examples are mostly wasted.
#include <cstdint>

namespace loom {

class NoiseScale {
 public:
  // `decay`: the moving averages' factor per step, in [0, 1) (0: no smoothing).
  explicit NoiseScale(double decay = 0.95);
  // One step's norms: |G_small|^2 of a batch of b_small, |G_big|^2 of b_big (b_small < b_big).
  // A non-finite input (a skipped step) is ignored.
  void add(double small_sq, double b_small, double big_sq, double b_big);
  // The smoothed estimates (0 before the first add).
  double grad_sq() const;
  double trace() const;
  // tr(S) / |G|^2, or a negative number while |G|^2 is not positive (not yet meaningful).
  double b_simple() const;
  int64_t count() const { return n_; }

  // For checkpoints: the raw (not bias-corrected) averages, the weight they carry (the bias
  // correction: 1 - decay^n at a fixed decay; kept as a sum, so a resume with another decay goes
  // on correctly) and the count.
  struct State {
    double g2 = 0, tr = 0, weight = 0;
    int64_t n = 0;
  };
  State state() const { return {g2_, tr_, w_, n_}; }
  void restore(const State& s);

 private:
  double decay_, g2_ = 0, tr_ = 0, w_ = 0;
  int64_t n_ = 0;
};

}  // namespace loom
