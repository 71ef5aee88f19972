// The learning-rate schedules (engine/optim/lr_schedule.hpp) at the points that define them,
// cosine against the formula of earlier Loom versions, and the recipe's keys
// resolved into a schedule (engine/train/lr_schedule_of.hpp).
#include <catch2/catch.hpp>

#include <cmath>
#include <cstdio>

#include "engine/config/recipe.hpp"
#include "engine/optim/lr_schedule.hpp"
#include "engine/train/lr_schedule_of.hpp"

using namespace loom;

namespace {
constexpr double kPi = 3.14159265358979323846;
constexpr double kLr = 1e-3, kMin = 1e-4, kMid = 5.5e-4;  // kMid: halfway between them

LrSchedule make(LrDecay d, int64_t warmup, int64_t decay_steps) {
  LrSchedule s{kLr, kMin, warmup, decay_steps};
  s.decay = d;
  return s;
}
}  // namespace

TEST_CASE("every schedule warms up linearly from lr over warmup_steps") {
  for (LrDecay d : {LrDecay::Cosine, LrDecay::Linear, LrDecay::Wsd, LrDecay::InverseSqrt, LrDecay::Constant}) {
    const LrSchedule s = make(d, 10, 110);
    CHECK(s.at(0) == Approx(kLr / 10));
    CHECK(s.at(4) == Approx(kLr / 2));
    CHECK(s.at(9) == Approx(kLr));
  }
}

TEST_CASE("cosine is the earlier versions' formula and ends at min_lr after decay_steps") {
  const LrSchedule s = make(LrDecay::Cosine, 10, 110);
  for (int64_t i = 10; i < 200; ++i) {
    const double p = std::min(1.0, double(i - 10) / 100.0);
    CHECK(s.at(i) == Approx(kMin + 0.5 * (kLr - kMin) * (1.0 + std::cos(kPi * p))).epsilon(1e-14));
  }
  CHECK(s.at(10) == kLr);
  CHECK(s.at(60) == Approx(kMid));
  CHECK(s.at(110) == kMin);
  CHECK(s.at(1000) == kMin);
}

TEST_CASE("linear falls at a constant rate to min_lr") {
  const LrSchedule s = make(LrDecay::Linear, 10, 110);
  CHECK(s.at(10) == kLr);
  CHECK(s.at(35) == Approx(kLr - 0.25 * (kLr - kMin)));
  CHECK(s.at(60) == Approx(kMid));
  CHECK(s.at(109) == Approx(kMin + 0.01 * (kLr - kMin)));
  CHECK(s.at(110) == kMin);
  CHECK(s.at(500) == kMin);
  for (int64_t i = 11; i <= 110; ++i) CHECK(s.at(i - 1) - s.at(i) == Approx((kLr - kMin) / 100));
}

TEST_CASE("constant holds lr after the warmup") {
  const LrSchedule s = make(LrDecay::Constant, 10, 110);
  for (int64_t i : {10, 60, 110, 5000}) CHECK(s.at(i) == kLr);
}

TEST_CASE("wsd holds lr until the cooldown then falls along its shape to min_lr") {
  LrSchedule s = make(LrDecay::Wsd, 10, 110);
  s.wsd_decay_steps = 20;  // the cooldown is steps 90..110
  for (DecayShape shape : {DecayShape::Linear, DecayShape::Cosine, DecayShape::Sqrt, DecayShape::Exponential}) {
    s.wsd_shape = shape;
    for (int64_t i = 10; i <= 90; ++i) CHECK(s.at(i) == kLr);
    CHECK(s.at(91) < kLr);
    CHECK(s.at(110) == Approx(kMin));
    CHECK(s.at(300) == kMin);
  }
  s.wsd_shape = DecayShape::Linear;
  CHECK(s.at(95) == Approx(kLr - 0.25 * (kLr - kMin)));
  CHECK(s.at(100) == Approx(kMid));
  s.wsd_shape = DecayShape::Cosine;
  CHECK(s.at(95) == Approx(kMin + 0.5 * (kLr - kMin) * (1 + std::cos(kPi / 4))));
  CHECK(s.at(100) == Approx(kMid));
  s.wsd_shape = DecayShape::Sqrt;  // 1 - sqrt(f): a quarter of the way is half the drop
  CHECK(s.at(95) == Approx(kMid));
  CHECK(s.at(100) == Approx(kMin + (1 - std::sqrt(0.5)) * (kLr - kMin)));
  s.wsd_shape = DecayShape::Exponential;  // Megatron's: 2 * 0.5^f - 1
  CHECK(s.at(100) == Approx(kMin + (std::sqrt(2.0) - 1) * (kLr - kMin)));
  CHECK(s.at(110) == kMin);
  // A cooldown longer than the decay phase is all of it: linear from the warmup's end.
  s.wsd_shape = DecayShape::Linear;
  s.wsd_decay_steps = 1000;
  CHECK(s.at(10) == kLr);
  CHECK(s.at(60) == Approx(kMid));
}

TEST_CASE("inverse_sqrt falls as lr sqrt(warmup over step) down to its floor as Megatron's") {
  LrSchedule s = make(LrDecay::InverseSqrt, 10, 5000);
  CHECK(s.at(10) == kLr);
  CHECK(s.at(40) == Approx(kLr / 2));                        // sqrt(10 / 40)
  CHECK(s.at(90) == Approx(kLr / 3));
  for (int64_t i = 11; i < 1000; ++i) CHECK(s.at(i) < s.at(i - 1));
  CHECK(s.at(999) == Approx(kLr * std::sqrt(10.0 / 999)));  // 1.0005e-4: still above kMin
  CHECK(s.at(1000) == Approx(kMin));                        // 10 (1e-3 / 1e-4)^2: the floor
  for (int64_t i : {1001, 2000, 4999}) CHECK(s.at(i) == kMin);
  CHECK(s.at(5000) == kMin);
  // Without a warmup Megatron counts it as one step: lr at steps 0 and 1, lr / 2 at step 4.
  s = make(LrDecay::InverseSqrt, 0, 5000);
  CHECK(s.at(0) == kLr);
  CHECK(s.at(1) == kLr);
  CHECK(s.at(4) == Approx(kLr / 2));
  // Megatron's cut-off: min_lr after decay_steps.
  s = make(LrDecay::InverseSqrt, 10, 100);
  CHECK(s.at(100) == Approx(kLr * std::sqrt(10.0 / 100)));
  CHECK(s.at(101) == kMin);
}

TEST_CASE("inverse_sqrt's described floor step is where the schedule first gives min_lr") {
  // The closed form w (lr / min_lr)^2 rounds either way (lr 7e-4, min_lr 7e-5, warmup 10: at(1000)
  // is one ulp above min_lr): the header must name the step at() reaches it.
  for (double lr : {6e-4, 7e-4, 1e-3, 3e-3})
    for (double ratio : {2.0, 3.0, 7.0, 10.0})
      for (int64_t warmup : {0, 1, 10, 37, 100}) {
        LrSchedule s{lr, lr / ratio, warmup, 1000000};
        s.decay = LrDecay::InverseSqrt;
        int64_t first = warmup;
        while (s.at(first) > s.min_lr) ++first;
        char want[64];
        std::snprintf(want, sizeof want, "at step %lld, held there", (long long)first + 1);
        INFO("lr " << lr << " ratio " << ratio << " warmup " << warmup);
        CHECK_THAT(describe(s), Catch::EndsWith(want));
      }
}

TEST_CASE("a fractional position (goodput) agrees with the whole steps and lies between them") {
  for (LrDecay d : {LrDecay::Cosine, LrDecay::Linear, LrDecay::Wsd, LrDecay::InverseSqrt, LrDecay::Constant}) {
    LrSchedule s = make(d, 10, 110);
    s.wsd_decay_steps = 30;
    for (int64_t i = 0; i < 130; ++i) {
      CHECK(s.at_progress(double(i)) == s.at(i));
      const double half = s.at_progress(double(i) + 0.5);
      CHECK(half <= std::max(s.at(i), s.at(i + 1)) + 1e-18);
      CHECK(half >= std::min(s.at(i), s.at(i + 1)) - 1e-18);
    }
  }
}

TEST_CASE("the recipe's keys make the schedule, auto resolved against train.steps") {
  Recipe r;
  r.train.steps = 500;
  r.optim.warmup_steps = 50;
  LrSchedule s = lr_schedule_of(r);
  CHECK(s.decay == LrDecay::Cosine);
  CHECK(s.decay_steps == 500);
  CHECK(describe(s) == "warmup 50 steps to 0.0006, then cosine from 0.0006 down to 6e-05, reached after step 500");
  r.optim.lr_decay = "wsd";
  s = lr_schedule_of(r);
  CHECK(s.decay == LrDecay::Wsd);
  CHECK(s.wsd_decay_steps == 90);  // auto: a fifth of 450
  CHECK(s.wsd_shape == DecayShape::Linear);
  CHECK(describe(s) == "warmup 50 steps to 0.0006, then stable at 0.0006 through step 411, then linear down to "
                       "6e-05, reached after step 500");
  r.optim.decay_steps = 400;
  r.optim.wsd_decay_steps = 40;
  r.optim.wsd_shape = "sqrt";
  s = lr_schedule_of(r);
  CHECK(s.decay_steps == 400);
  CHECK(s.wsd_decay_steps == 40);
  CHECK(s.wsd_shape == DecayShape::Sqrt);
  CHECK(s.at(360) == r.optim.lr);
  CHECK(s.at(361) < r.optim.lr);
  CHECK(s.at(450) == r.optim.min_lr);
  // train.steps inside the warmup (a short trial of a long recipe): no contradiction said.
  r.optim.lr_decay = "cosine";
  r.optim.decay_steps = 0;
  r.train.steps = 30;
  CHECK(describe(lr_schedule_of(r)) ==
        "warmup 50 steps to 0.0006, then 6e-05 from step 52 (the decay ends at step 30, inside the warmup)");
  r.optim.lr_decay = "constant";
  r.optim.warmup_steps = 0;
  CHECK(describe(lr_schedule_of(r)) == "constant at 0.0006");
  r.optim.lr_decay = "linear";
  CHECK(lr_schedule_of(r).decay == LrDecay::Linear);
  r.optim.lr_decay = "inverse_sqrt";
  r.optim.warmup_steps = 100;
  r.train.steps = 1000;
  s = lr_schedule_of(r);
  CHECK(s.decay == LrDecay::InverseSqrt);
  // Megatron's cut-off: index 1000 still on the curve (progress step 1001), min_lr after.
  CHECK(describe(s) == "warmup 100 steps to 0.0006, then falling as 1/sqrt(step) from 0.0006 to 0.000189737 at step "
                       "1001, then 6e-05");
  r.optim.min_lr = 3e-4;  // reached at 0-based step 100 (0.0006 / 0.0003)^2 = 400
  s = lr_schedule_of(r);
  CHECK(s.at(399) > 3e-4);
  CHECK(s.at(400) == 3e-4);
  CHECK(describe(s) == "warmup 100 steps to 0.0006, then falling as 1/sqrt(step) from 0.0006 to the floor "
                       "optim.min_lr=0.0003 at step 401, held there");
}
