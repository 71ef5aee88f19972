#pragma once
// Feeds one rank its share of each global batch, prepared ahead of time by a background
// thread so a step never waits on data unless the disk cannot keep up (the wait is measured).
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <mutex>
#include <thread>
#include <vector>

#include "engine/data/sampler.hpp"
#include "engine/data/token_dataset.hpp"

namespace loom {

struct LoaderState {
  int64_t next_step = 0;     // the next step's number
  int64_t next_sample = -1;  // its first position in the sample stream (see sampler.hpp);
                             // -1: next_step * global batch (a run whose global batch never changed)
};

struct StepBatch {
  int64_t step = 0;
  std::vector<int32_t> tokens, targets;  // (micro_steps, B, T)
};

struct LoaderLayout {
  int seq_len = 0, micro_batch = 0, micro_steps = 0;  // T, B, accumulation steps
  int dp_rank = 0, dp = 1;
  uint64_t seed = 0;
  int global_batch() const { return micro_batch * micro_steps * dp; }
};

class DataLoader {
 public:
  DataLoader(TokenDataset data, LoaderLayout layout, int prefetch_steps = 2, LoaderState start = {});
  ~DataLoader();
  DataLoader(const DataLoader&) = delete;
  DataLoader& operator=(const DataLoader&) = delete;

  // The next step's batch (blocks if it is not ready yet; that time is added to wait_seconds()).
  StepBatch next();
  // From the next step on, `micro_steps` micro-batches per rank per step (a new global batch):
  // the batches prepared ahead are dropped and the stream goes on at the next unseen sample.
  void set_micro_steps(int micro_steps);
  int micro_steps() const { return layout_.micro_steps; }
  // The state to save in a checkpoint: resuming from it yields the batches after the last next().
  LoaderState state() const { return {consumed_, first_sample(consumed_)}; }
  double wait_seconds() const { return wait_s_; }
  uint64_t samples_per_epoch() const { return index_.size(); }
  const SampleIndex& index() const { return index_; }
  const TokenDataset& data() const { return data_; }
  // The global sample id at position `p` of the stream (for tests and tools).
  uint64_t sample_at(uint64_t p) const { return loom::sample_at(index_, layout_.seed, p); }

 private:
  void produce();
  void stop_worker();
  StepBatch make(int64_t step) const;
  // The stream position of step `step`'s first sample: steps are consecutive runs of global
  // batches from where the loader started (a resumed run may have another global batch than the
  // steps before it, so positions count samples, not steps).
  int64_t first_sample(int64_t step) const;

  TokenDataset data_;
  SampleIndex index_;
  LoaderLayout layout_;
  size_t depth_;
  int64_t start_step_, start_sample_;
  int64_t consumed_;
  int64_t produced_;
  double wait_s_ = 0;
  std::deque<StepBatch> ready_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;
  std::thread worker_;
};

// Validation: `batches` global batches of samples in order (no shuffle, wrapping if the split
// is small; a blend's parts interleaved by their shares, each in order), this rank's share, as
// (batches * micro_steps) micro-batches of (B, T).
std::vector<StepBatch> validation_batches(const TokenDataset& data, const LoaderLayout& layout, int batches);

}  // namespace loom
