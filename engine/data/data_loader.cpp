#include "engine/data/data_loader.hpp"

#include <chrono>

namespace loom {

DataLoader::DataLoader(TokenDataset data, LoaderLayout layout, int prefetch_steps, LoaderState start)
    : data_(std::move(data)),
      index_(data_, layout.seq_len),
      layout_(layout),
      depth_(size_t(std::max(1, prefetch_steps))),
      start_step_(start.next_step),
      start_sample_(start.next_sample >= 0 ? start.next_sample : start.next_step * int64_t(layout.global_batch())),
      consumed_(start.next_step),
      produced_(start.next_step) {
  worker_ = std::thread([this] { produce(); });
}

DataLoader::~DataLoader() { stop_worker(); }

void DataLoader::stop_worker() {
  {
    std::lock_guard<std::mutex> lk(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  worker_.join();
}

void DataLoader::set_micro_steps(int micro_steps) {
  if (micro_steps == layout_.micro_steps) return;
  stop_worker();
  // Positions count samples from the last rebase: the steps after the last one handed out start
  // where it ended, at the new global batch.
  start_sample_ = first_sample(consumed_);
  start_step_ = produced_ = consumed_;
  ready_.clear();
  layout_.micro_steps = micro_steps;
  stop_ = false;
  worker_ = std::thread([this] { produce(); });
}

int64_t DataLoader::first_sample(int64_t step) const {
  return start_sample_ + (step - start_step_) * int64_t(layout_.global_batch());
}

StepBatch DataLoader::make(int64_t step) const {
  const int B = layout_.micro_batch, T = layout_.seq_len, M = layout_.micro_steps;
  const uint64_t GB = uint64_t(layout_.global_batch());
  const uint64_t first = uint64_t(first_sample(step)) + uint64_t(layout_.dp_rank) * (GB / layout_.dp);
  StepBatch b;
  b.step = step;
  b.tokens.resize(size_t(M) * B * T);
  b.targets.resize(b.tokens.size());
  for (int i = 0; i < M * B; ++i)
    index_.fill(loom::sample_at(index_, layout_.seed, first + uint64_t(i)), b.tokens.data() + size_t(i) * T,
                b.targets.data() + size_t(i) * T);
  return b;
}

void DataLoader::produce() {
  for (;;) {
    int64_t step;
    {
      std::unique_lock<std::mutex> lk(mu_);
      cv_.wait(lk, [&] { return stop_ || ready_.size() < depth_; });
      if (stop_) return;
      step = produced_++;
    }
    StepBatch b = make(step);  // outside the lock: this is the work being overlapped
    {
      std::lock_guard<std::mutex> lk(mu_);
      ready_.push_back(std::move(b));
    }
    cv_.notify_all();
  }
}

StepBatch DataLoader::next() {
  auto t0 = std::chrono::steady_clock::now();
  std::unique_lock<std::mutex> lk(mu_);
  cv_.wait(lk, [&] { return !ready_.empty(); });
  wait_s_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  StepBatch b = std::move(ready_.front());
  ready_.pop_front();
  consumed_ = b.step + 1;
  lk.unlock();
  cv_.notify_all();
  return b;
}

std::vector<StepBatch> validation_batches(const TokenDataset& data, const LoaderLayout& layout, int batches) {
  SampleIndex index(data, layout.seq_len);
  const int B = layout.micro_batch, T = layout.seq_len, M = layout.micro_steps;
  const uint64_t GB = uint64_t(layout.global_batch());
  std::vector<StepBatch> out(static_cast<size_t>(batches));
  for (int s = 0; s < batches; ++s) {
    StepBatch& b = out[size_t(s)];
    b.step = s;
    b.tokens.resize(size_t(M) * B * T);
    b.targets.resize(b.tokens.size());
    const uint64_t first = uint64_t(s) * GB + uint64_t(layout.dp_rank) * (GB / layout.dp);
    for (int i = 0; i < M * B; ++i)
      index.fill(index.in_order(first + uint64_t(i)), b.tokens.data() + size_t(i) * T,
                 b.targets.data() + size_t(i) * T);
  }
  return out;
}

}  // namespace loom
