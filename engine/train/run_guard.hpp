#pragma once
// What the loop decides after each step, identically on every rank:
//   - the run's health: the first bad step of its history (non-finite, or a loss above three
//     times that of a model guessing uniformly, 3 ln V), carried across resumes, after which
//     checkpoints are marked not clean; and the streak of skipped (non-finite) steps, which
//     ends the run at train.max_nonfinite_steps (an fp16 overflow that the loss scaler handles,
//     with a finite loss, is neither);
//   - whether to stop early with a checkpoint: a stop signal (SIGUSR1/SIGTERM/SIGINT) on any
//     rank, train.max_minutes about to run out, or rank 0 failing to write the run directory.
//     The ranks agree by a max over one float (collective over the world).
#include <chrono>
#include <cstdint>
#include <string>

#include "engine/config/recipe.hpp"
#include "engine/train/train_step.hpp"
#include "parallel/mpi_communicator.hpp"

namespace loom {

struct StopVote {
  bool stop_now = false;     // end the run after this step's checkpoint (before train.steps)
  bool log_failed = false;   // rank 0 could not write the run directory: save, then fail
  std::string stopped_early; // why, for the summary ("" unless stop_now for a signal or the time budget)
};

class RunGuard {
 public:
  // `first_bad_step` as resumed (-1: a clean history); `resumed_from` names the checkpoint in
  // messages; train.max_minutes counts from `started`; `saves`: checkpoint.dir is set (what a
  // stop promises).
  RunGuard(const TrainConfig& train, int vocab_size, int64_t first_bad_step, std::string resumed_from, int rank,
           std::chrono::steady_clock::time_point started, bool saves);

  // After step `step` (0-based) produced `r`: updates the bad-step bookkeeping and says so (rank 0).
  void after_step(int64_t step, const StepResult& r);
  bool too_many_bad() const { return consecutive_bad_ >= train_.max_nonfinite_steps; }
  int consecutive_bad() const { return consecutive_bad_; }
  int64_t first_bad_step() const { return first_bad_step_; }

  // Collective over `world`. `step_s`: this step's time; `max_save_s`: the longest save so far
  // (the room train.max_minutes must leave for the last one); `log_failed`: this rank (rank 0)
  // could not write the run directory; `at_end`: this was the run's last step (it ends and saves
  // anyway: no early stop is declared).
  StopVote vote(int64_t step, double step_s, double max_save_s, bool log_failed, parallel::MpiCommunicator& world,
                bool at_end);

 private:
  const TrainConfig& train_;
  double diverged_loss_;  // 3 ln V
  int64_t first_bad_step_;
  std::string resumed_from_;
  int rank_;
  bool saves_;
  int consecutive_bad_ = 0;
  std::chrono::steady_clock::time_point started_;
};

}  // namespace loom
