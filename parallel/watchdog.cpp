#include "parallel/watchdog.hpp"

#include <mpi.h>

#include <array>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <mutex>
#include <thread>

namespace loom::parallel {
namespace {

int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

// One slot per waiting thread (the main thread, each communicator's worker, the checkpoint
// writer): a handful. A slot is claimed with a compare-exchange, so entering a scope takes no lock.
struct Slot {
  std::atomic<bool> used{false};
  std::atomic<int64_t> since_ns{0};
  const char* op = nullptr;
  const char* group = nullptr;
};
constexpr int kSlots = 64;

struct State {
  std::array<Slot, kSlots> slots;
  std::atomic<bool> on{false};
  std::atomic<int64_t> step{-1};
  double timeout_s = 0;
  int rank = 0;
  std::thread checker;
  std::mutex mu;
  std::condition_variable cv;
  bool stopping = false;
};
State& state() {
  static State s;
  return s;
}

void check_loop() {
  State& s = state();
  const auto period = std::chrono::duration<double>(std::min(1.0, s.timeout_s / 4));
  std::unique_lock<std::mutex> lk(s.mu);
  while (!s.cv.wait_for(lk, period, [&] { return s.stopping; })) {
    const int64_t now = now_ns();
    for (Slot& slot : s.slots) {
      if (!slot.used.load(std::memory_order_acquire)) continue;
      const int64_t since = slot.since_ns.load(std::memory_order_acquire);
      const double waited = double(now - since) * 1e-9;
      if (since == 0 || waited < s.timeout_s) continue;
      const int64_t step = s.step.load();
      std::fprintf(stderr,
                   "loom: error: rank %d: %s on the %s group has not completed after %.0f s (%s%lld); a peer rank is "
                   "dead, stuck or far behind. Aborting the job (parallel.timeout_s = %g).\n",
                   s.rank, slot.op, slot.group, waited, step >= 0 ? "training step " : "step ",
                   (long long)(step >= 0 ? step + 1 : 0), s.timeout_s);
      std::fflush(stderr);
      MPI_Abort(MPI_COMM_WORLD, 3);
      std::_Exit(3);  // MPI_Abort does not return; in case it does
    }
  }
}

}  // namespace

void Watchdog::start(double timeout_s, int world_rank) {
  State& s = state();
  if (timeout_s <= 0 || s.on.load()) return;
  s.timeout_s = timeout_s;
  s.rank = world_rank;
  s.stopping = false;
  s.on.store(true);
  s.checker = std::thread(check_loop);
}

void Watchdog::stop() {
  State& s = state();
  if (!s.on.load()) return;
  {
    std::lock_guard<std::mutex> lk(s.mu);
    s.stopping = true;
  }
  s.cv.notify_all();
  s.checker.join();
  s.on.store(false);
}

void Watchdog::set_step(int64_t step) { state().step.store(step); }

Watchdog::Scope::Scope(const char* op, const char* group) {
  State& s = state();
  if (!s.on.load(std::memory_order_relaxed)) return;
  for (int i = 0; i < kSlots; ++i) {
    bool expected = false;
    if (s.slots[size_t(i)].used.compare_exchange_strong(expected, true)) {
      Slot& slot = s.slots[size_t(i)];
      slot.op = op;
      slot.group = group;
      slot.since_ns.store(now_ns(), std::memory_order_release);
      slot_ = i;
      return;
    }
  }  // more than kSlots threads waiting at once: this one goes unwatched
}

Watchdog::Scope::~Scope() {
  if (slot_ < 0) return;
  Slot& slot = state().slots[size_t(slot_)];
  slot.since_ns.store(0, std::memory_order_release);
  slot.used.store(false, std::memory_order_release);
}

}  // namespace loom::parallel
