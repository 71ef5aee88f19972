// The goodput policy's arithmetic (engine/optim/goodput.hpp) and the batch controller's
// bookkeeping (engine/train/batch_controller.hpp), against hand-computed values and the
// closed-form optimum of Pollux's model.
#include <catch2/catch.hpp>

#include <cmath>

#include "engine/optim/goodput.hpp"
#include "engine/train/batch_controller.hpp"

using namespace loom;

namespace {
GoodputBounds bounds(int64_t unit, int64_t ref, int64_t lo, int64_t hi) {
  GoodputBounds b;
  b.unit = unit, b.reference = ref, b.min = lo, b.max = hi;
  return b;
}
Recipe goodput_recipe() {
  Recipe r;
  r.train.micro_batch = 8;
  r.parallel.dp = 2;
  r.train.global_batch = 16;
  r.train.steps = 100;
  r.train.batch_policy = "goodput";
  r.train.batch_every = 10;
  return r;
}
}  // namespace

TEST_CASE("efficiency is 1 at the reference batch and falls to M0/M without noise", "[goodput]") {
  CHECK(batch_efficiency(37.0, 16, 16) == 1.0);
  CHECK(batch_efficiency(0.0, 16, 64) == Approx(0.25));
  CHECK(batch_efficiency(-5.0, 16, 64) == Approx(0.25));  // not yet estimated: as no noise
  CHECK(batch_efficiency(48.0, 16, 64) == Approx(64.0 / 112.0));
  CHECK(batch_efficiency(1e12, 16, 1024) == Approx(1.0));  // all noise: every sequence counts
}

TEST_CASE("goodput is throughput times efficiency", "[goodput]") {
  const GoodputBounds b = bounds(8, 16, 8, 256);
  const StepTimeModel t{0.150, 0.010};
  // M = 48: k = 6 rounds, 0.21 s per step, 228.6 seq/s, efficiency (10 + 16) / (10 + 48).
  CHECK(goodput(48, t, 10.0, b) == Approx(48 / 0.21 * 26.0 / 58.0));
}

TEST_CASE("the chosen batch is the analytic optimum of Pollux's model", "[goodput]") {
  // For phi >> M the efficiency is ~ (phi + M0)/phi, constant, and goodput ~ M / (t0 + M t1 / c):
  // increasing in M. For a finite phi, d/dk of k c / (t0 + k t1) x 1 / (phi + k c) = 0 gives
  //   k* = sqrt(t0 phi / (c t1)).
  const int64_t c = 8;
  const GoodputBounds b = bounds(c, 8, 8, 8 * 4096);
  for (double phi : {50.0, 400.0, 3000.0}) {
    for (const StepTimeModel t : {StepTimeModel{0.2, 0.01}, StepTimeModel{0.05, 0.02}}) {
      const double kstar = std::sqrt(t.t0 * phi / (double(c) * t.t1));
      const BatchDecision d = decide_batch(8, t, phi, b);
      const double k = double(d.to / c);
      INFO("phi " << phi << " t0 " << t.t0 << " t1 " << t.t1 << ": k* " << kstar << ", chosen " << k);
      // Integer rounds: the best is one of the two whole k around k* (either, by goodput).
      CHECK(k >= std::floor(kstar));
      CHECK(k <= std::ceil(kstar));
      if (k > 1) CHECK(d.changed());
    }
  }
}

TEST_CASE("the batch grows as the noise scale grows and stays within the bounds", "[goodput]") {
  const GoodputBounds b = bounds(16, 16, 16, 128);
  const StepTimeModel t{0.150, 0.010};
  int64_t current = 16, last = 16;
  for (double phi : {0.5, 2.0, 5.0, 10.0, 25.0, 60.0, 200.0, 1e6}) {
    current = decide_batch(current, t, phi, b).to;
    CHECK(current >= last);
    CHECK(current % 16 == 0);
    CHECK(current <= 128);
    last = current;
  }
  CHECK(last == 128);  // pure noise, a large fixed cost: the largest batch
  // No noise at all: the smallest batch, whatever the fixed cost.
  CHECK(decide_batch(128, t, 0.0, b).to == 16);
}

TEST_CASE("a gain below min_gain keeps the batch", "[goodput]") {
  GoodputBounds b = bounds(16, 16, 16, 128);
  const StepTimeModel t{0.150, 0.010};
  // phi 2.3: batch 32 beats 16 by 0.4% only (100.4 against 100.0 seq/s).
  BatchDecision d = decide_batch(16, t, 2.3, b);
  CHECK_FALSE(d.changed());
  CHECK(d.reason.rfind("kept", 0) == 0);
  b.min_gain = 0;
  d = decide_batch(16, t, 2.3, b);
  CHECK(d.to == 32);
  CHECK(d.goodput_to > d.goodput_from);
}

TEST_CASE("learning-rate rules", "[goodput]") {
  CHECK(lr_factor("linear", 64, 16, 10.0) == 4.0);
  CHECK(lr_factor("sqrt", 64, 16, 10.0) == 2.0);
  // AdaScale's gain (phi/M0 + 1) / (phi/M + 1): 1 without noise, M/M0 with only noise.
  CHECK(lr_factor("adascale", 64, 16, 0.0) == Approx(1.0));
  CHECK(lr_factor("adascale", 64, 16, 1e12) == Approx(4.0));
  CHECK(lr_factor("adascale", 64, 16, 32.0) == Approx((32.0 / 16 + 1) / (32.0 / 64 + 1)));
  CHECK(lr_factor("adascale", 16, 16, 32.0) == 1.0);
  CHECK_THROWS_WITH(lr_factor("cubic", 64, 16, 1.0), Catch::Contains("linear, sqrt or adascale"));
}

TEST_CASE("LOOM_GOODPUT_TIMING parses milliseconds and refuses anything else", "[goodput]") {
  CHECK_FALSE(timing_override(nullptr).valid());
  CHECK_FALSE(timing_override("").valid());
  const StepTimeModel t = timing_override("150:12.5");
  CHECK(t.t0 == Approx(0.150));
  CHECK(t.t1 == Approx(0.0125));
  for (const char* bad : {"150", "150:0", "-1:10", "a:b", "150:10:3", "150:10ms"})
    CHECK_THROWS_WITH(timing_override(bad), Catch::Contains("LOOM_GOODPUT_TIMING"));
}

TEST_CASE("the controller counts the budget in sequences and trims the last step", "[goodput]") {
  BatchController c(goodput_recipe());  // unit 16, M0 16, budget 100 x 16 = 1600, bounds [16, 128]
  REQUIRE(c.adaptive());
  CHECK(c.bounds().max == 128);
  CHECK(c.progress(800) == 50.0);
  CHECK_FALSE(c.budget_done(1584));
  CHECK(c.budget_done(1600));
  const BatchDecision d = c.decide(StepTimeModel{0.150, 0.010}, 1e6);
  CHECK(d.to == 128);
  CHECK(c.next_batch(0) == 128);
  CHECK(c.next_batch(1600 - 48) == 48);  // the last step trains what the budget leaves
  // The schedule follows sequences: at 800 sequences it is at step 50, times sqrt(128/16).
  LrSchedule s{1e-3, 1e-4, 10, 100};
  CHECK(c.lr(s, 7, 800, 128, 5.0) == Approx(s.at(50) * std::sqrt(8.0)));
  CHECK(s.at_progress(37.0) == s.at(37));
  CHECK(s.at_progress(3.0) == s.at(3));
}

TEST_CASE("the controller times the step as t0 + k t1 from the passes' share", "[goodput]") {
  BatchController c(goodput_recipe());
  CHECK_FALSE(c.measured().valid());
  c.observe(2, 0.100, 0.080);  // 2 rounds: t1 40 ms, t0 20 ms
  c.observe(4, 0.180, 0.160);  // 4 rounds: t1 40 ms, t0 20 ms
  c.observe(4, 0.1, -1);       // untimed: ignored
  const StepTimeModel m = c.measured();
  CHECK(c.observed() == 2);
  CHECK(m.t1 == Approx(0.040));
  CHECK(m.t0 == Approx(0.020));
  c.decide(m, 1.0);
  CHECK(c.observed() == 0);  // a decision starts a new window
}

TEST_CASE("a resume goes on at the checkpoint's batch, fitted to this layout", "[goodput]") {
  BatchController c(goodput_recipe());
  CHECK(c.resume_at(64).empty());
  CHECK(c.batch() == 64);
  Recipe r = goodput_recipe();
  r.parallel.dp = 3;  // unit 24; bounds must be multiples of it
  r.train.global_batch = 24;
  r.train.batch_max = 120;
  BatchController three(r);
  const std::string note = three.resume_at(64);  // 64 is no multiple of 24: the nearest, 72
  CHECK(three.batch() == 72);
  CHECK_THAT(note, Catch::Contains("continuing at 72"));
  CHECK(three.resume_at(1000).find("continuing at 120") != std::string::npos);
  Recipe fixed = goodput_recipe();
  fixed.train.batch_policy = "fixed";
  BatchController f(fixed);
  CHECK_FALSE(f.adaptive());
  CHECK(f.resume_at(64).empty());
  CHECK(f.batch() == 16);
  CHECK_FALSE(f.budget_done(1 << 30));
}
