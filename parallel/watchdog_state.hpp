#pragma once
// The watchdog's internals, shared by its two halves: watchdog.cpp (the scopes, the checking
// thread, the abort) and watchdog_side_channel.cpp (asking the other ranks where they are, and
// answering them). Not for use outside parallel/watchdog*.cpp.
#include <mpi.h>

#include <array>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

namespace loom::parallel::watchdog_detail {

inline int64_t now_ns() {
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
  std::vector<std::string> hosts;  // every world rank's host name (gathered by start())
  std::atomic<int (*)()> stop_probe{nullptr};  // the stop signal received (0: none); set_stop_probe
  std::deque<std::pair<MPI_Request, std::unique_ptr<Answer>>> sending;  // checker thread only
  std::thread checker;
  std::mutex mu;
  std::condition_variable cv;
  bool stopping = false;
};
// The one State of this process (defined in watchdog.cpp).
State& state();

// "R on HOST": how messages name a rank (the host from start()'s gathering, when known).
std::string rank_name(const State& s, int rank);

// Every rank's answer to "where are you?", asked over the side channel for at most `wait_s`.
// `answers` lives on the heap and is never freed: a late answer may still land in it after the
// asker gave up (the asker aborts soon after, or asks again with fresh buffers).
struct Census {
  const std::vector<Answer>* answers = nullptr;
  std::vector<char> got;  // per world rank: answered (this rank always has)
  std::vector<int> silent() const;
};
Census ask_everyone(State& s, double wait_s);

// Where this rank is: what it answers to a query (and what the asker knows of itself).
Answer describe_self(State& s);
// Answers the other ranks' watchdogs (non-blocking: probe, receive what has arrived, send).
void serve(State& s);
// Asks every rank where it is, for at most `wait_s` (answering the others meanwhile), and says
// which members of the timed-out call's group have not reached it, which rank(s) the waiting
// ranks are waiting for at the root (not in any communication call themselves), and which ranks
// did not answer.
std::string who_is_missing(State& s, const Call& call, double wait_s);

}  // namespace loom::parallel::watchdog_detail
