// A resume's account of the optimizer and schedule keys changed since the checkpoint
// (resume_data.hpp: schedule_changes), against the recipe the checkpoint recorded.
#include <catch2/catch.hpp>

#include <cstdio>
#include <string>
#include <vector>

#include "engine/config/recipe_io.hpp"
#include "engine/optim/lr_schedule.hpp"
#include "engine/train/resume_data.hpp"

using namespace loom;

TEST_CASE("a resume names every optimizer and schedule key changed since the checkpoint") {
  Recipe now;
  const std::string saved = recipe_to_yaml(now);
  CHECK(schedule_changes(saved, now, 20, 20).empty());
  CHECK(schedule_changes("", now, 20, 20).empty());  // an older checkpoint recorded no recipe
  now.optim.lr = 2e-4;
  now.train.steps = now.train.steps + 100;
  now.optim.grad_clip = 0;
  const std::vector<std::string> c = schedule_changes(saved, now, 20, 20);
  REQUIRE(c.size() == 4);
  CHECK_THAT(c[0], Catch::StartsWith("optim.lr is 0.0002, the checkpoint's run had 0.0006: the new value applies "
                                     "from step 21"));
  CHECK_THAT(c[1], Catch::StartsWith("train.steps is 1100, the checkpoint's run had 1000"));
  CHECK_THAT(c[2], Catch::StartsWith("optim.grad_clip is 0.0, the checkpoint's run had 1.0: the new value applies from step 21"));
  // The rate where the run goes on, under both schedules (no warmup: cosine from step 0).
  const LrSchedule was{6e-4, 6e-5, 0, 1000}, then{2e-4, 6e-5, 0, 1100};
  char expect[160];
  std::snprintf(expect, sizeof expect, "the learning rate at step 21 is %g (the checkpoint's schedule had %g): it jumps",
                then.at(20), was.at(20));
  CHECK_THAT(c[3], Catch::StartsWith(expect) && Catch::Contains("; the schedule now: cosine from 0.0002"));
}

TEST_CASE("a longer WSD run resumed in its stable phase keeps its learning rate and says so") {
  Recipe r;
  r.optim.lr_decay = "wsd";
  r.optim.warmup_steps = 10;
  r.optim.wsd_decay_steps = 100;
  r.train.steps = 1000;
  const std::string saved = recipe_to_yaml(r);
  r.train.steps = 3000;  // extend the stable phase: the cooldown moves to steps 2900-3000
  const std::vector<std::string> c = schedule_changes(saved, r, 500, 500);
  REQUIRE(c.size() == 2);
  CHECK_THAT(c[0], Catch::StartsWith("train.steps is 3000, the checkpoint's run had 1000"));
  CHECK_THAT(c[1], Catch::StartsWith("the learning rate at step 501 is 0.0006, as the checkpoint's schedule had it; "
                                     "the schedule now: warmup 10 steps to 0.0006, then stable at 0.0006 through step "
                                     "2901, then linear down to 6e-05, reached after step 3000"));
  // Resumed inside the old cooldown, the rate goes back up to the stable value.
  const std::vector<std::string> late = schedule_changes(saved, r, 950, 950);
  REQUIRE(late.size() == 2);
  CHECK_THAT(late[1], Catch::Contains("is 0.0006 (the checkpoint's schedule had 0.00033): it jumps"));
}

TEST_CASE("every schedule key reads back from the checkpoint's recipe as it was written") {
  Recipe r;
  r.optim.lr = 2e-4;
  r.optim.min_lr = 1.5e-5;
  r.optim.warmup_steps = 7;
  r.optim.lr_decay = "wsd";
  r.optim.decay_steps = 900;
  r.optim.wsd_decay_steps = 90;
  r.optim.wsd_shape = "sqrt";
  r.train.steps = 1000;
  r.optim.weight_decay = 0.05;
  r.optim.beta1 = 0.8;
  r.optim.beta2 = 0.99;
  r.optim.grad_clip = 0.5;
  CHECK(schedule_changes(recipe_to_yaml(r), r, 10, 10).empty());
  // A value the checkpoint recorded but that does not read as one (hand-edited) is not compared.
  std::string saved = recipe_to_yaml(r);
  const size_t at = saved.find("  beta2: 0.99");
  REQUIRE(at != std::string::npos);
  saved.replace(at, 13, "  beta2: [0.99]");
  r.optim.beta2 = 0.95;
  CHECK(schedule_changes(saved, r, 10, 10).empty());
}

TEST_CASE("a checkpoint from before the decay keys compares against the cosine it had") {
  Recipe r;
  std::string saved = recipe_to_yaml(r);
  // An older Loom's recipe has no lr_decay, decay_steps or wsd keys.
  for (const char* key : {"  lr_decay:", "  decay_steps:", "  wsd_decay_steps:", "  wsd_shape:"}) {
    const size_t at = saved.find(key);
    REQUIRE(at != std::string::npos);
    saved.erase(at, saved.find('\n', at) - at + 1);
  }
  CHECK(schedule_changes(saved, r, 5, 5).empty());
  r.optim.lr_decay = "linear";
  const std::vector<std::string> c = schedule_changes(saved, r, 5, 5);
  REQUIRE(c.size() == 2);
  CHECK_THAT(c[0], Catch::StartsWith("optim.lr_decay is linear, the checkpoint's run had cosine"));
}
