#include "engine/optim/goodput.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <stdexcept>

namespace loom {

double batch_efficiency(double phi, int64_t reference, int64_t batch) {
  phi = std::max(phi, 0.0);
  return (phi + double(reference)) / (phi + double(batch));
}

double goodput(int64_t batch, const StepTimeModel& time, double phi, const GoodputBounds& b) {
  const double step_s = time.at(batch / b.unit);
  return double(batch) / step_s * batch_efficiency(phi, b.reference, batch);
}

BatchDecision decide_batch(int64_t current, const StepTimeModel& time, double phi, const GoodputBounds& b) {
  BatchDecision d;
  d.from = d.to = current;
  d.phi = phi;
  d.time = time;
  d.goodput_from = d.goodput_to = goodput(current, time, phi, b);
  d.efficiency_to = batch_efficiency(phi, b.reference, current);
  // Every candidate (a few hundred at most: max / unit); ties go to the smaller batch.
  int64_t best = b.min;
  double best_g = -1;
  for (int64_t m = b.min; m <= b.max; m += b.unit) {
    const double g = goodput(m, time, phi, b);
    if (g > best_g) best = m, best_g = g;
  }
  char line[256];
  if (best != current && best_g > d.goodput_from * (1 + b.min_gain)) {
    d.to = best;
    d.goodput_to = best_g;
    d.efficiency_to = batch_efficiency(phi, b.reference, best);
    std::snprintf(line, sizeof line,
                  "goodput %.1f -> %.1f seq/s (+%.1f%%): B_simple %.1f, step time %.1f ms + %lld x %.1f ms, "
                  "efficiency %.3f -> %.3f",
                  d.goodput_from, best_g, 100 * (best_g / d.goodput_from - 1), phi, time.t0 * 1e3,
                  (long long)(best / b.unit), time.t1 * 1e3, batch_efficiency(phi, b.reference, current),
                  d.efficiency_to);
  } else {
    std::snprintf(line, sizeof line,
                  "kept: the best batch %lld gives %.1f seq/s against %.1f (needs +%.0f%%): B_simple %.1f, step time "
                  "%.1f ms + k x %.1f ms",
                  (long long)best, best_g, d.goodput_from, 100 * b.min_gain, phi, time.t0 * 1e3, time.t1 * 1e3);
  }
  d.reason = line;
  return d;
}

double lr_factor(const std::string& rule, int64_t batch, int64_t reference, double phi) {
  const double s = double(batch) / double(reference);
  if (rule == "linear") return s;
  if (rule == "sqrt") return std::sqrt(s);
  if (rule == "adascale") return s * batch_efficiency(phi, reference, batch);
  throw std::invalid_argument("train.batch_lr_rule: '" + rule + "' is not linear, sqrt or adascale");
}

StepTimeModel timing_override(const char* text) {
  if (!text || !*text) return {};
  double t0 = -1, t1 = -1;
  char tail = 0;
  if (std::sscanf(text, "%lf:%lf%c", &t0, &t1, &tail) != 2 || !(t0 >= 0) || !(t1 > 0) || !std::isfinite(t0) ||
      !std::isfinite(t1))
    throw std::runtime_error(std::string("LOOM_GOODPUT_TIMING='") + text +
                             "': expected T0:T1 in milliseconds, T0 >= 0 and T1 > 0 (e.g. 40:12)");
  return {t0 / 1e3, t1 / 1e3};
}

}  // namespace loom
