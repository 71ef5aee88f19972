#include "parallel/watchdog.hpp"

#include <mpi.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <memory>
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
// The plain fields are written before `since_ns` (release) and read after it (acquire).
struct Slot {
  std::atomic<bool> used{false};
  std::atomic<int64_t> since_ns{0};
  const char* op = nullptr;
  const char* group = nullptr;
  int channel = -1;
  int64_t seq = 0;  // this call's number on its channel (1 = the first)
  bool collective = true;
};
constexpr int kSlots = 64;
struct Call {  // what a slot holds, copied out of it
  const char* op;
  const char* group;
  int channel;
  int64_t seq;
  bool collective;
};

// A communicator: its members (world ranks) and how many collectives this rank has entered on it.
struct Channel {
  std::atomic<bool> used{false};
  std::atomic<int64_t> entered{0};
  const char* group = nullptr;
  // The same on every member and different for every communicator: the group name, its
  // occurrence among this rank's channels of that name, and the lowest member's world rank
  // (same-named communicators, e.g. the tensor-parallel groups, are disjoint).
  std::string key;
  std::vector<int> members;
};
constexpr int kChannels = 64;

// The side channel's messages (raw bytes: every rank runs the same binary). A query asks a rank
// where it is; the answer: its step, every channel's count, and the calls it is waiting in.
constexpr int kQueryTag = 30517, kAnswerTag = 30518;
constexpr int kAnswerChannels = 16, kAnswerCalls = 4;
struct Query {
  int32_t from = 0;
};
struct Answer {
  int64_t step = -1;  // training step (-1: not in the training loop)
  int32_t n_channels = 0, n_calls = 0;
  struct {
    char key[48];
    int64_t entered;
  } channels[kAnswerChannels] = {};
  struct {
    char key[48];  // "" for a call without a channel
    char op[48];
    char group[32];
    int64_t seq;  // > 0 for a counted collective
    double open_s;
  } calls[kAnswerCalls] = {};  // longest-open first
};

struct State {
  std::array<Slot, kSlots> slots;
  std::array<Channel, kChannels> channels;
  std::mutex channels_mu;  // registration and the watchdog thread's reads (never on the scope path)
  std::atomic<bool> on{false};
  std::atomic<int64_t> step{-1};
  double timeout_s = 0;
  int rank = 0, world = 1;
  MPI_Comm side = MPI_COMM_NULL;  // duplicate of MPI_COMM_WORLD for the watchdog threads only
  std::deque<std::pair<MPI_Request, std::unique_ptr<Answer>>> sending;  // checker thread only
  std::thread checker;
  std::mutex mu;
  std::condition_variable cv;
  bool stopping = false;
};
State& state() {
  static State s;
  return s;
}

void copy_str(char* dst, size_t n, const char* src) { std::snprintf(dst, n, "%s", src ? src : ""); }

// Where this rank is: what it answers to a query (and what the asker knows of itself).
Answer describe_self(State& s) {
  Answer a;
  a.step = s.step.load();
  std::lock_guard<std::mutex> lk(s.channels_mu);
  for (const Channel& c : s.channels) {
    if (!c.used.load() || a.n_channels == kAnswerChannels) continue;
    copy_str(a.channels[a.n_channels].key, sizeof a.channels[0].key, c.key.c_str());
    a.channels[a.n_channels].entered = c.entered.load();
    ++a.n_channels;
  }
  const int64_t now = now_ns();
  for (Slot& slot : s.slots) {
    if (!slot.used.load(std::memory_order_acquire)) continue;
    const int64_t since = slot.since_ns.load(std::memory_order_acquire);
    if (since == 0) continue;
    const double open = double(now - since) * 1e-9;
    // Insert, longest-open first, keeping kAnswerCalls.
    int at = a.n_calls;
    while (at > 0 && a.calls[at - 1].open_s < open) --at;
    if (at >= kAnswerCalls) continue;
    for (int j = std::min(a.n_calls, kAnswerCalls - 1); j > at; --j) a.calls[j] = a.calls[j - 1];
    auto& c = a.calls[at];
    const bool counted = slot.channel >= 0 && slot.collective && s.channels[size_t(slot.channel)].used.load();
    copy_str(c.key, sizeof c.key, counted ? s.channels[size_t(slot.channel)].key.c_str() : "");
    copy_str(c.op, sizeof c.op, slot.op);
    copy_str(c.group, sizeof c.group, slot.group);
    c.seq = counted ? slot.seq : 0;
    c.open_s = open;
    a.n_calls = std::min(a.n_calls + 1, kAnswerCalls);
  }
  return a;
}

// Answers the other ranks' watchdogs (non-blocking: probe, receive what has arrived, send).
void serve(State& s) {
  if (s.side == MPI_COMM_NULL) return;
  for (int i = 0; i < 1024; ++i) {
    int flag = 0;
    MPI_Status st;
    if (MPI_Iprobe(MPI_ANY_SOURCE, kQueryTag, s.side, &flag, &st) != MPI_SUCCESS || !flag) break;
    Query q;
    if (MPI_Recv(&q, int(sizeof q), MPI_BYTE, st.MPI_SOURCE, kQueryTag, s.side, MPI_STATUS_IGNORE) != MPI_SUCCESS) break;
    auto a = std::make_unique<Answer>(describe_self(s));
    MPI_Request r = MPI_REQUEST_NULL;
    if (MPI_Isend(a.get(), int(sizeof(Answer)), MPI_BYTE, st.MPI_SOURCE, kAnswerTag, s.side, &r) == MPI_SUCCESS)
      s.sending.emplace_back(r, std::move(a));
  }
  for (auto it = s.sending.begin(); it != s.sending.end();) {
    int done = 0;
    if (MPI_Test(&it->first, &done, MPI_STATUS_IGNORE) != MPI_SUCCESS || done) it = s.sending.erase(it);
    else ++it;
  }
}

std::string step_text(int64_t step) {
  return step >= 0 ? "training step " + std::to_string(step + 1) : "outside the training loop";
}

std::string describe(const Answer& a) {
  char b[200];
  if (a.n_calls > 0)
    std::snprintf(b, sizeof b, "waiting %.0f s in %s on the %s group, %s", a.calls[0].open_s, a.calls[0].op,
                  a.calls[0].group, step_text(a.step).c_str());
  else
    std::snprintf(b, sizeof b, "in no communication call, %s", step_text(a.step).c_str());
  return b;
}

std::string join(const std::vector<std::string>& parts) {
  constexpr size_t kMax = 16;
  std::string out;
  for (size_t i = 0; i < parts.size() && i < kMax; ++i) out += (i ? ", " : "") + parts[i];
  if (parts.size() > kMax) out += " and " + std::to_string(parts.size() - kMax) + " more";
  return out;
}

int64_t entered_on(const Answer& a, const char* key) {  // -1: not a member
  for (int i = 0; i < a.n_channels; ++i)
    if (std::strcmp(a.channels[i].key, key) == 0) return a.channels[i].entered;
  return -1;
}

// Asks every rank where it is, for at most `wait_s` (answering the others meanwhile), and says
// which members of the timed-out call's group have not reached it, which rank(s) the waiting
// ranks are waiting for at the root (not in any communication call themselves), and which ranks
// did not answer.
std::string who_is_missing(State& s, const Call& call, double wait_s) {
  if (s.side == MPI_COMM_NULL) return "; a peer rank is dead, stuck or far behind";
  std::vector<int> members;
  std::string key;
  {
    std::lock_guard<std::mutex> lk(s.channels_mu);
    if (call.channel >= 0 && s.channels[size_t(call.channel)].used.load()) {
      members = s.channels[size_t(call.channel)].members;
      key = s.channels[size_t(call.channel)].key;
    }
  }
  const bool by_count = !key.empty() && call.collective;
  // Heap, never freed: a send to a dead rank may still be pending, or an answer land, after we
  // give up waiting (the job is aborted right after).
  static Query query;
  query.from = s.rank;
  auto* answers = new std::vector<Answer>(size_t(s.world));
  auto* recvs = new std::vector<MPI_Request>(size_t(s.world), MPI_REQUEST_NULL);
  std::vector<char> got(size_t(s.world), 0);
  for (int r = 0; r < s.world; ++r) {
    if (r == s.rank) continue;
    MPI_Irecv(&(*answers)[size_t(r)], int(sizeof(Answer)), MPI_BYTE, r, kAnswerTag, s.side, &(*recvs)[size_t(r)]);
    MPI_Request q = MPI_REQUEST_NULL;
    if (MPI_Isend(&query, int(sizeof query), MPI_BYTE, r, kQueryTag, s.side, &q) == MPI_SUCCESS) MPI_Request_free(&q);
  }
  (*answers)[size_t(s.rank)] = describe_self(s);
  got[size_t(s.rank)] = 1;
  const int64_t deadline = now_ns() + int64_t(wait_s * 1e9);
  for (;;) {
    serve(s);  // the others may be asking us at the same moment
    int n = 0;
    for (int r = 0; r < s.world; ++r) {
      if (!got[size_t(r)] && (*recvs)[size_t(r)] != MPI_REQUEST_NULL) {
        int done = 0;
        if (MPI_Test(&(*recvs)[size_t(r)], &done, MPI_STATUS_IGNORE) == MPI_SUCCESS && done) got[size_t(r)] = 1;
      }
      n += got[size_t(r)];
    }
    if (n == s.world || now_ns() > deadline) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  const auto& A = *answers;
  auto text = [&](int r) { return std::to_string(r) + " (" + describe(A[size_t(r)]) + ")"; };
  std::vector<std::string> direct, roots, silent, others;
  std::vector<char> named(size_t(s.world), 0);
  if (by_count) {
    for (int r : members)
      if (r != s.rank && got[size_t(r)] && entered_on(A[size_t(r)], key.c_str()) < call.seq) {
        direct.push_back(text(r));
        named[size_t(r)] = 1;
      }
  } else {
    for (int r : members.empty() ? std::vector<int>{} : members)
      if (r != s.rank && got[size_t(r)]) others.push_back(text(r));
  }
  // At the root: ranks that some waiting rank's collective lacks and that wait for nothing.
  std::vector<char> root(size_t(s.world), 0);
  for (int w = 0; w < s.world; ++w) {
    if (!got[size_t(w)]) continue;
    for (int c = 0; c < A[size_t(w)].n_calls; ++c) {
      const auto& call_w = A[size_t(w)].calls[c];
      if (call_w.seq <= 0) continue;
      for (int r = 0; r < s.world; ++r) {
        if (!got[size_t(r)] || A[size_t(r)].n_calls > 0) continue;
        const int64_t e = entered_on(A[size_t(r)], call_w.key);
        if (e >= 0 && e < call_w.seq) root[size_t(r)] = 1;
      }
    }
  }
  for (int r = 0; r < s.world; ++r) {
    if (root[size_t(r)] && !named[size_t(r)]) roots.push_back(text(r));
    if (!got[size_t(r)]) silent.push_back(std::to_string(r));
  }
  std::string out;
  if (by_count) {
    if (!direct.empty()) out += "; ranks that have not reached it: " + join(direct);
    else if (silent.empty()) out += "; every rank of the group has reached it (a lost message or a network fault?)";
  } else if (!others.empty()) {
    out += "; the group's other ranks: " + join(others);
  }
  if (!roots.empty()) out += "; at the root of the wait: " + join(roots);
  if (!silent.empty()) {
    char within[32];
    std::snprintf(within, sizeof within, "%g", wait_s);
    out += std::string("; ranks that did not answer within ") + within + " s (dead, or the whole process stuck): " +
           join(silent);
  }
  return out;
}

[[noreturn]] void abort_job(int code) {
  // MPI_Abort should not return, nor hang; if it does either, exit anyway after a while.
  std::thread([code] {
    std::this_thread::sleep_for(std::chrono::seconds(20));
    std::_Exit(code);
  }).detach();
  MPI_Abort(MPI_COMM_WORLD, code);
  std::_Exit(code);
}

void check_loop() {
  State& s = state();
  // Short ticks: this thread also answers the other ranks' watchdogs.
  const auto period = std::chrono::duration<double>(std::min(0.1, s.timeout_s / 4));
  const double wait_s = std::clamp(s.timeout_s / 4, 2.0, 10.0);
  std::unique_lock<std::mutex> lk(s.mu);
  while (!s.cv.wait_for(lk, period, [&] { return s.stopping; })) {
    serve(s);
    const int64_t now = now_ns();
    for (Slot& slot : s.slots) {
      if (!slot.used.load(std::memory_order_acquire)) continue;
      const int64_t since = slot.since_ns.load(std::memory_order_acquire);
      const double waited = double(now - since) * 1e-9;
      if (since == 0 || waited < s.timeout_s) continue;
      const int64_t step = s.step.load();
      const Call copy_of_slot{slot.op, slot.group, slot.channel, slot.seq, slot.collective};
      if (slot.since_ns.load(std::memory_order_acquire) != since) continue;  // completed (and reused) meanwhile
      const std::string where = step >= 0 ? "training step " + std::to_string(step + 1) : "outside the training loop";
      // The side channel is MPI too: if the library itself is wedged, asking the others could
      // block. A backstop ends the process however that goes.
      const int rank = s.rank;
      std::thread([rank, wait_s] {
        std::this_thread::sleep_for(std::chrono::duration<double>(wait_s + 20));
        std::fprintf(stderr, "loom: error: rank %d: the watchdog could not abort the job through MPI; exiting\n", rank);
        std::_Exit(3);
      }).detach();
      const std::string who = who_is_missing(s, copy_of_slot, wait_s);
      std::fprintf(stderr,
                   "loom: error: rank %d: %s on the %s group has not completed after %.0f s (%s)%s. Aborting the "
                   "job (parallel.timeout_s = %g).\n",
                   s.rank, copy_of_slot.op, copy_of_slot.group, waited, where.c_str(), who.c_str(), s.timeout_s);
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
