#include "engine/train/run_guard.hpp"

#include <cmath>
#include <cstdio>

#include "engine/train/stop_request.hpp"

namespace loom {

RunGuard::RunGuard(const TrainConfig& train, int vocab_size, int64_t first_bad_step, std::string resumed_from,
                   int rank, std::chrono::steady_clock::time_point started, bool saves)
    : train_(train),
      diverged_loss_(3 * std::log(double(vocab_size))),
      first_bad_step_(first_bad_step),
      resumed_from_(std::move(resumed_from)),
      rank_(rank),
      saves_(saves),
      started_(started) {}

void RunGuard::after_step(int64_t step, const StepResult& r) {
  // Every rank sees the same loss and norm (both are global), so all agree on what follows.
  // fp16's overflow with a finite loss is the loss scaler's business (skip, back off), not a bad
  // step, unless the scale has nowhere left to go.
  const bool scaler_overflow = r.overflow && std::isfinite(r.loss) && r.loss_scale > 1;
  if (scaler_overflow && rank_ == 0)
    std::printf("loom: step %lld: fp16 gradients overflowed at loss scale %g: update skipped, the scale backs off\n",
                (long long)step + 1, r.loss_scale);
  const bool bad = r.skipped && !scaler_overflow;
  if (first_bad_step_ < 0 && (bad || r.loss > diverged_loss_)) {
    first_bad_step_ = step + 1;
    if (rank_ == 0)
      std::fprintf(stderr, "loom: step %lld: %s (loss %g): checkpoints from here on are marked not clean; the last "
                           "clean one is kept whatever checkpoint.keep_last says%s%s\n",
                   (long long)step + 1, bad ? "the run went non-finite" : "the loss diverged", r.loss,
                   resumed_from_.empty() ? "" : "; this session resumed from ", resumed_from_.c_str());
  }
  if (scaler_overflow) return;  // neither good nor bad: the streak of bad steps is unchanged
  if (!r.skipped) {
    consecutive_bad_ = 0;
    return;
  }
  ++consecutive_bad_;
  if (rank_ == 0)
    std::fprintf(stderr, "loom: step %lld: non-finite %s (loss %g, gradient norm %g): update skipped (%d in a row; "
                         "train.max_nonfinite_steps = %d)\n",
                 (long long)step + 1, std::isfinite(r.loss) ? "gradient norm" : "loss", r.loss, r.grad_norm,
                 consecutive_bad_, train_.max_nonfinite_steps);
}

StopVote RunGuard::vote(int64_t step, double step_s, double max_save_s, bool log_failed,
                        parallel::MpiCommunicator& world, bool at_end) {
  float v = log_failed ? 3.0f : stop_signal() ? 2.0f : 0.0f;
  if (!v && train_.max_minutes > 0) {
    const double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - started_).count();
    const double margin = 2 * step_s + (max_save_s > 0 ? 1.5 * max_save_s : 10 * step_s);
    if (elapsed + margin > train_.max_minutes * 60) v = 1.0f;
  }
  world.all_reduce(&v, 1, parallel::ReduceOp::Max);
  StopVote out;
  const bool before_end = !at_end;
  out.stop_now = v > 0 && before_end && step + 1 != train_.stop_at_step;
  if (v == 2 && rank_ == 0 && before_end)
    std::printf("loom: stop requested (%s): %s step %lld and stopping\n",
                stop_signal() ? stop_signal_name() : "a signal on another rank",
                saves_ ? "saving a checkpoint of" : "no checkpoint.dir, so nothing is saved: finishing", (long long)step + 1);
  out.log_failed = v == 3;
  if (out.stop_now && !out.log_failed)
    out.stopped_early = v == 2 ? std::string("a stop signal (") + stop_signal_name() + ")"
                               : "train.max_minutes = " + std::to_string(train_.max_minutes);
  return out;
}

}  // namespace loom
