#include "parallel/watchdog.hpp"

#include <unistd.h>

#include <algorithm>
#include <array>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "parallel/bounded_abort.hpp"
#include "parallel/watchdog_state.hpp"

namespace loom::parallel {
namespace watchdog_detail {

State& state() {
  static State s;
  return s;
}

}  // namespace watchdog_detail

using namespace watchdog_detail;

namespace {

const char* signal_text(int sig) {
  switch (sig) {
    case SIGTERM: return "SIGTERM";
    case SIGUSR1: return "SIGUSR1";
    case SIGINT: return "SIGINT";
    default: return "a stop signal";
  }
}

// A stop signal (preemption, a time limit, srun --kill-on-bad-exit or mpirun ending the job
// after another rank died) asks for a save at the next step boundary. While this rank is blocked
// in a communication call that boundary only comes if every rank is alive: so once a signal has
// arrived and a call has been open for kSignalProbeS, ask every rank, and if one does not answer
// (dead, or stopped) the step cannot complete: abort now rather than wait for parallel.timeout_s
// or the launcher's SIGKILL. A healthy job answers within milliseconds and goes on to its save.
constexpr double kSignalProbeS = 1.0, kSignalAnswerS = 2.0, kSignalReprobeS = 3.0;

struct SignalWatch {
  int64_t seen_ns = 0;       // when the checker first saw the signal
  int64_t next_probe_ns = 0;
};

void check_signal(State& s, SignalWatch& w, int64_t now) {
  auto probe = s.stop_probe.load();
  const int sig = probe ? probe() : 0;
  if (!sig) return;
  if (!w.seen_ns) w.seen_ns = now;
  const Slot* longest = nullptr;
  int64_t longest_since = 0;
  for (const Slot& slot : s.slots) {
    const int64_t since = slot.since_ns.load(std::memory_order_acquire);
    if (!slot.used.load(std::memory_order_acquire) || since == 0) continue;
    if (!longest || since < longest_since) longest = &slot, longest_since = since;
  }
  const int64_t probe_after = int64_t(kSignalProbeS * 1e9);
  if (!longest || now - longest_since < probe_after || now - w.seen_ns < probe_after || now < w.next_probe_ns) return;
  const Call call{longest->op, longest->group, longest->channel, longest->seq, longest->collective};
  const Census census = ask_everyone(s, kSignalAnswerS);
  w.next_probe_ns = now_ns() + int64_t(kSignalReprobeS * 1e9);
  const std::vector<int> silent = census.silent();
  if (silent.empty()) return;  // everyone is alive: the step can complete, the save follows
  std::string names;
  for (size_t i = 0; i < silent.size(); ++i) names += (i ? ", " : "") + rank_name(s, silent[i]);
  const int64_t step = s.step.load();
  const std::string where = step >= 0 ? "training step " + std::to_string(step + 1) : "outside the training loop";
  std::fprintf(stderr,
               "loom: error: rank %s: %s arrived while this rank was blocked in %s on the %s group (%s); ranks that "
               "did not answer within %g s (dead, or the whole process stuck): %s. The step cannot complete, so "
               "nothing can be saved: aborting the job.\n",
               rank_name(s, s.rank).c_str(), signal_text(sig), call.op, call.group, where.c_str(), kSignalAnswerS,
               names.c_str());
  std::fflush(stderr);
  abort_job(3);
}

void check_loop() {
  State& s = state();
  // Short ticks: this thread also answers the other ranks' watchdogs.
  const auto period = std::chrono::duration<double>(std::min(0.1, s.timeout_s / 4));
  const double wait_s = std::clamp(s.timeout_s / 4, 2.0, 10.0);
  SignalWatch signal_watch;
  // Halfway to the timeout, the watchdog asks where everyone is and warns, once per call: the
  // diagnosis is then in the log even when something else ends the job first (the launcher
  // noticing a lost node through its keepalive, the scheduler's time limit), and a straggler
  // is visible before it costs the job.
  std::array<int64_t, kSlots> warned{};  // per slot: the `since_ns` of the call it warned about
  std::unique_lock<std::mutex> lk(s.mu);
  while (!s.cv.wait_for(lk, period, [&] { return s.stopping; })) {
    serve(s);
    const int64_t now = now_ns();
    check_signal(s, signal_watch, now);
    for (Slot& slot : s.slots) {
      if (!slot.used.load(std::memory_order_acquire)) continue;
      const int64_t since = slot.since_ns.load(std::memory_order_acquire);
      const double waited = double(now - since) * 1e-9;
      if (since == 0 || waited < s.timeout_s / 2) continue;
      const int64_t step = s.step.load();
      const Call copy_of_slot{slot.op, slot.group, slot.channel, slot.seq, slot.collective};
      if (slot.since_ns.load(std::memory_order_acquire) != since) continue;  // completed (and reused) meanwhile
      const std::string where = step >= 0 ? "training step " + std::to_string(step + 1) : "outside the training loop";
      const size_t slot_index = size_t(&slot - s.slots.data());
      if (waited < s.timeout_s) {
        if (warned[slot_index] == since) continue;
        warned[slot_index] = since;
        const std::string who = who_is_missing(s, copy_of_slot, wait_s);
        std::fprintf(stderr,
                     "loom: warning: rank %s: %s on the %s group has not completed after %.0f s (%s)%s. The job is "
                     "aborted if it has not completed after parallel.timeout_s = %g s.\n",
                     rank_name(s, s.rank).c_str(), copy_of_slot.op, copy_of_slot.group, waited, where.c_str(),
                     who.c_str(), s.timeout_s);
        std::fflush(stderr);
        continue;
      }
      // The side channel is MPI too: if the library itself is wedged, asking the others could
      // block. A backstop ends the process however that goes.
      const int rank = s.rank;
      std::thread([rank, wait_s] {
        std::this_thread::sleep_for(std::chrono::duration<double>(wait_s + 2 * kAbortDeadlineS));
        std::fprintf(stderr, "loom: error: rank %d: the watchdog could not abort the job through MPI; exiting\n", rank);
        std::_Exit(3);
      }).detach();
      const std::string who = who_is_missing(s, copy_of_slot, wait_s);
      std::fprintf(stderr,
                   "loom: error: rank %s: %s on the %s group has not completed after %.0f s (%s)%s. Aborting the "
                   "job (parallel.timeout_s = %g).\n",
                   rank_name(s, s.rank).c_str(), copy_of_slot.op, copy_of_slot.group, waited, where.c_str(), who.c_str(), s.timeout_s);
      std::fflush(stderr);
      abort_job(3);
    }
  }
}

}  // namespace

void Watchdog::start(double timeout_s, int world_rank) {
  State& s = state();
  if (timeout_s <= 0 || s.on.load()) return;
  s.timeout_s = timeout_s;
  s.rank = world_rank;
  MPI_Comm_size(MPI_COMM_WORLD, &s.world);
  // The side channel needs MPI calls from this thread while others are in MPI.
  int level = MPI_THREAD_SINGLE;
  MPI_Query_thread(&level);
  if (s.side == MPI_COMM_NULL && level == MPI_THREAD_MULTIPLE && MPI_Comm_dup(MPI_COMM_WORLD, &s.side) == MPI_SUCCESS)
    MPI_Comm_set_errhandler(s.side, MPI_ERRORS_RETURN);  // kept until MPI_Finalize: freeing it is collective
  // Every rank's host, so that a message names the node of a rank that cannot answer any more.
  constexpr int kHost = 64;
  char mine[kHost] = {0};
  gethostname(mine, kHost - 1);
  std::vector<char> all(size_t(s.world) * kHost, 0);
  if (s.side != MPI_COMM_NULL &&
      MPI_Allgather(mine, kHost, MPI_CHAR, all.data(), kHost, MPI_CHAR, s.side) == MPI_SUCCESS) {
    s.hosts.clear();
    for (int r = 0; r < s.world; ++r) s.hosts.emplace_back(all.data() + size_t(r) * kHost);
  } else {
    s.hosts.assign(size_t(s.world), "");
    s.hosts[size_t(world_rank)] = mine;
  }
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

void Watchdog::set_stop_probe(int (*probe)()) { state().stop_probe.store(probe); }

int Watchdog::register_channel(const char* group, const std::vector<int>& members) {
  State& s = state();
  std::lock_guard<std::mutex> lk(s.channels_mu);
  int same = 0;
  for (const Channel& c : s.channels)
    if (c.used.load() && c.group && std::strcmp(c.group, group) == 0) ++same;
  for (int i = 0; i < kChannels; ++i) {
    Channel& c = s.channels[size_t(i)];
    if (c.used.load()) continue;
    c.group = group;
    c.key = std::string(group) + "#" + std::to_string(same) + "@" +
            std::to_string(members.empty() ? -1 : *std::min_element(members.begin(), members.end()));
    c.members = members;
    c.entered.store(0);
    c.used.store(true);
    // A stuck-rank report carries kAnswerChannels channels per rank: say so once if there are
    // more, rather than leave a report silently short.
    int used = 0;
    for (const Channel& k : s.channels) used += k.used.load() ? 1 : 0;
    static bool warned = false;
    if (used > kAnswerChannels && !warned) {
      warned = true;
      std::fprintf(stderr, "loom: warning: %d watched communicators; a watchdog report names the calls of the first %d "
                           "only\n", used, kAnswerChannels);
    }
    return i;
  }
  return -1;
}

void Watchdog::release_channel(int channel) {
  if (channel < 0 || channel >= kChannels) return;
  State& s = state();
  std::lock_guard<std::mutex> lk(s.channels_mu);
  s.channels[size_t(channel)].used.store(false);
}

Watchdog::Scope::Scope(const char* op, const char* group, int channel, bool collective) {
  State& s = state();
  // Collectives are counted whether or not the watchdog is on, so that every member counts the
  // same calls (point-to-point calls differ between the ranks of a group: not counted).
  if (channel >= kChannels) channel = -1;
  const int64_t seq = channel >= 0 && collective
                          ? s.channels[size_t(channel)].entered.fetch_add(1, std::memory_order_relaxed) + 1
                          : 0;
  if (!s.on.load(std::memory_order_relaxed)) return;
  for (int i = 0; i < kSlots; ++i) {
    bool expected = false;
    if (s.slots[size_t(i)].used.compare_exchange_strong(expected, true)) {
      Slot& slot = s.slots[size_t(i)];
      slot.op = op;
      slot.group = group;
      slot.channel = channel;
      slot.seq = seq;
      slot.collective = collective;
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
