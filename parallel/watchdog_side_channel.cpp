// The watchdog's side channel (watchdog.hpp): answering the other ranks' questions, and, when a
// call times out here, asking every rank where it is and naming the ranks that are missing.
#include <algorithm>
#include <cstdio>
#include <cstring>

#include "parallel/watchdog_state.hpp"

namespace loom::parallel::watchdog_detail {
namespace {

void copy_str(char* dst, size_t n, const char* src) { std::snprintf(dst, n, "%s", src ? src : ""); }

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

}  // namespace

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

// Asks every rank where it is, for at most `wait_s` (answering the others meanwhile), and says
// which members of the timed-out call's group have not reached it, which rank(s) the waiting
// ranks are waiting for at the root (not in any communication call themselves), and which ranks
// did not answer.
std::string rank_name(const State& s, int rank) {
  const bool known = rank >= 0 && size_t(rank) < s.hosts.size() && !s.hosts[size_t(rank)].empty();
  return std::to_string(rank) + (known ? " on " + s.hosts[size_t(rank)] : "");
}

std::vector<int> Census::silent() const {
  std::vector<int> out;
  for (size_t r = 0; r < got.size(); ++r)
    if (!got[r]) out.push_back(int(r));
  return out;
}

Census ask_everyone(State& s, double wait_s) {
  Census c;
  // Heap, never freed: a send to a dead rank may still be pending, or an answer land, after we
  // give up waiting.
  static Query query;
  query.from = s.rank;
  auto* answers = new std::vector<Answer>(size_t(s.world));
  auto* recvs = new std::vector<MPI_Request>(size_t(s.world), MPI_REQUEST_NULL);
  c.answers = answers;
  c.got.assign(size_t(s.world), 0);
  (*answers)[size_t(s.rank)] = describe_self(s);
  c.got[size_t(s.rank)] = 1;
  if (s.side == MPI_COMM_NULL) return c;
  for (int r = 0; r < s.world; ++r) {
    if (r == s.rank) continue;
    MPI_Irecv(&(*answers)[size_t(r)], int(sizeof(Answer)), MPI_BYTE, r, kAnswerTag, s.side, &(*recvs)[size_t(r)]);
    MPI_Request q = MPI_REQUEST_NULL;
    if (MPI_Isend(&query, int(sizeof query), MPI_BYTE, r, kQueryTag, s.side, &q) == MPI_SUCCESS) MPI_Request_free(&q);
  }
  const int64_t deadline = now_ns() + int64_t(wait_s * 1e9);
  for (;;) {
    serve(s);  // the others may be asking us at the same moment
    int n = 0;
    for (int r = 0; r < s.world; ++r) {
      if (!c.got[size_t(r)] && (*recvs)[size_t(r)] != MPI_REQUEST_NULL) {
        int done = 0;
        if (MPI_Test(&(*recvs)[size_t(r)], &done, MPI_STATUS_IGNORE) == MPI_SUCCESS && done) c.got[size_t(r)] = 1;
      }
      n += c.got[size_t(r)];
    }
    if (n == s.world || now_ns() > deadline) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return c;
}

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
  const Census census = ask_everyone(s, wait_s);
  const std::vector<char>& got = census.got;
  const auto& A = *census.answers;
  auto text = [&](int r) { return rank_name(s, r) + " (" + describe(A[size_t(r)]) + ")"; };
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
    if (!got[size_t(r)]) silent.push_back(rank_name(s, r));
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

}  // namespace loom::parallel::watchdog_detail
