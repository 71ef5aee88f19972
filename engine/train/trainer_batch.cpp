// The Trainer's part of train.batch_policy goodput (batch_controller.hpp decides): a new batch
// into the data loader and the step, and the decision with its record.
#include <cstdio>

#include "engine/train/trainer.hpp"
#include "parallel/watchdog.hpp"

namespace loom {

void Trainer::apply_batch(int64_t global_batch) {
  const int micro_steps = int(global_batch / batch_.unit());
  train_data_->set_micro_steps(micro_steps);
  step_->set_batch(micro_steps, global_batch);
}

void Trainer::decide_batch(int64_t done) {
  // Every rank decides alike: the noise scale is the same everywhere (it comes from reduced
  // norms), and the step-time model is the slowest rank's (the step waits for it).
  StepTimeModel time = goodput_timing_;
  if (!time.valid()) {
    const StepTimeModel mine = batch_.measured();
    float t[2] = {mine.valid() ? float(mine.t0) : -1.0f, mine.valid() ? float(mine.t1) : -1.0f};
    groups_.world().all_reduce(t, 2, parallel::ReduceOp::Max);
    time = {t[0], t[1]};
  }
  const double phi = noise_.b_simple();
  const int64_t was = batch_.batch();
  std::string skip;
  if (!time.valid())
    skip = "no step timed since the last decision";
  else if (phi < 0)
    skip = "the gradient noise scale is not estimated yet";
  BatchDecision d;
  if (skip.empty()) {
    d = batch_.decide(time, phi);
  } else {
    d.from = d.to = was;
    d.phi = phi;
    d.reason = "kept: " + skip;
  }
  data_now_.global_batch = batch_.batch();  // what a checkpoint of this step records
  if (rank_ != 0) return;
  if (d.changed())
    std::printf("loom: step %lld: global batch %lld -> %lld (%d micro-batches of %d per rank): %s\n", (long long)done,
                (long long)d.from, (long long)d.to, int(d.to / batch_.unit()), r_.train.micro_batch, d.reason.c_str());
  else
    std::printf("loom: step %lld: global batch %lld %s\n", (long long)done, (long long)d.from, d.reason.c_str());
  std::fflush(stdout);
  batch_decisions_.push_back({{"step", done},
                              {"from", d.from},
                              {"to", d.to},
                              {"b_simple", d.phi},
                              {"t0_ms", d.time.t0 * 1e3},
                              {"t1_ms", d.time.t1 * 1e3},
                              {"goodput_from", d.goodput_from},
                              {"goodput_to", d.goodput_to},
                              {"timing", goodput_timing_.valid() ? "LOOM_GOODPUT_TIMING" : "measured"},
                              {"reason", d.reason}});
  record_in_run_json("batch_decisions", batch_decisions_);
}

}  // namespace loom
