// The 1F1B pipeline order (parallel/pipeline_order.hpp) that run_1f1b executes, for every
// (stages, micro-batches) up to 8 and every stage: each stage's order on its own, then all
// stages together in a simulation of the transfers between them.
#include <catch2/catch.hpp>

#include <algorithm>
#include <map>
#include <sstream>
#include <string>
#include <tuple>
#include <vector>

#include "parallel/pipeline_order.hpp"

using loom::parallel::one_f_one_b_order;
using loom::parallel::pipeline_in_flight;
using loom::parallel::PipeAction;

namespace {

constexpr int kMaxStages = 8, kMaxMicro = 8;

std::string describe(const std::vector<PipeAction>& order) {
  std::ostringstream s;
  for (const PipeAction& a : order) s << to_string(a) << ' ';
  return s.str();
}

std::vector<int> micros_of(const std::vector<PipeAction>& order, PipeAction::Kind kind) {
  std::vector<int> out;
  for (const PipeAction& a : order)
    if (a.kind == kind) out.push_back(a.micro);
  return out;
}

std::vector<int> iota(int n) {
  std::vector<int> v(size_t(n), 0);
  for (int i = 0; i < n; ++i) v[size_t(i)] = i;
  return v;
}

// One stage's order, alone.
void check_stage(int stage, int stages, int m) {
  const std::vector<PipeAction> order = one_f_one_b_order(stage, stages, m);
  const bool first = stage == 0, last = stage == stages - 1;
  INFO("stage " << stage << " of " << stages << ", " << m << " micro-batches: " << describe(order));

  // Each micro-batch forwarded once and backwarded once, each in increasing order.
  CHECK(micros_of(order, PipeAction::Forward) == iota(m));
  CHECK(micros_of(order, PipeAction::Backward) == iota(m));
  // Each crossing of a stage boundary once per micro-batch, in order; none off either end.
  CHECK(micros_of(order, PipeAction::RecvActivation) == (first ? std::vector<int>{} : iota(m)));
  CHECK(micros_of(order, PipeAction::SendGradient) == (first ? std::vector<int>{} : iota(m)));
  CHECK(micros_of(order, PipeAction::SendActivation) == (last ? std::vector<int>{} : iota(m)));
  CHECK(micros_of(order, PipeAction::RecvGradient) == (last ? std::vector<int>{} : iota(m)));

  // The computations: warm-up forwards, then one forward and one backward at a time, then the
  // remaining backwards: F^w (F B)^(m-w) B^w with w = min(stages - stage - 1, m).
  const int warmup = std::min(stages - stage - 1, m);
  std::string expected, got;
  for (int i = 0; i < warmup; ++i) expected += 'F';
  for (int i = warmup; i < m; ++i) expected += "FB";
  for (int i = 0; i < warmup; ++i) expected += 'B';
  for (const PipeAction& a : order)
    if (!a.is_transfer()) got += a.kind == PipeAction::Forward ? 'F' : 'B';
  CHECK(got == expected);

  // Position of each action per micro-batch; then the order within one micro-batch, the peak of
  // activations held, and the slots (micro % in-flight) reused only once free.
  std::map<std::pair<int, int>, int> at;  // (kind, micro) -> index in order
  for (size_t i = 0; i < order.size(); ++i) at[{order[i].kind, order[i].micro}] = int(i);
  const int slots = pipeline_in_flight(stage, stages, m);
  for (int mb = 0; mb < m; ++mb) {
    INFO("micro-batch " << mb);
    CHECK(at.at({PipeAction::Forward, mb}) < at.at({PipeAction::Backward, mb}));
    if (!first) {
      CHECK(at.at({PipeAction::RecvActivation, mb}) < at.at({PipeAction::Forward, mb}));
      CHECK(at.at({PipeAction::Backward, mb}) < at.at({PipeAction::SendGradient, mb}));
    }
    if (!last) {
      CHECK(at.at({PipeAction::Forward, mb}) < at.at({PipeAction::SendActivation, mb}));
      CHECK(at.at({PipeAction::RecvGradient, mb}) < at.at({PipeAction::Backward, mb}));
      // One output-gradient buffer: received only once the previous backward has used it.
      if (mb > 0) CHECK(at.at({PipeAction::Backward, mb - 1}) < at.at({PipeAction::RecvGradient, mb}));
    }
  }
  int held = 0, peak = 0, backwards = 0;
  for (const PipeAction& a : order) {
    if (a.kind == PipeAction::RecvActivation || a.kind == PipeAction::Forward) {
      // Slot a.micro % slots is free: every earlier micro-batch in it has been backwarded.
      INFO(to_string(a));
      CHECK(a.micro - backwards < slots);
    }
    if (a.kind == PipeAction::Forward) peak = std::max(peak, ++held);
    if (a.kind == PipeAction::Backward) --held, ++backwards;
  }
  CHECK(held == 0);
  CHECK(peak == slots);

  // Only transfers are posted together, and only with a transfer after them: every group is
  // waited on before the next computation, so no buffer is touched while in flight.
  for (size_t i = 0; i < order.size(); ++i)
    if (order[i].with_next) {
      INFO("action " << i << ": " << to_string(order[i]));
      CHECK(order[i].is_transfer());
      REQUIRE(i + 1 < order.size());
      CHECK(order[i + 1].is_transfer());
    }
}

// Every stage's order run together. Each stage executes its actions in order; a group of
// transfers (posted together) completes only once every one of them has met its counterpart on
// the neighbouring stage (rendezvous, the strictest MPI and NCCL semantics: a send may not
// complete before its receive is posted). Messages between two stages with one tag match in
// posting order, as MPI's do: the n-th send must carry the micro-batch the n-th receive expects.
void check_pipeline(int stages, int m) {
  INFO(stages << " stages, " << m << " micro-batches");
  std::vector<std::vector<PipeAction>> order;
  for (int s = 0; s < stages; ++s) order.push_back(one_f_one_b_order(s, stages, m));

  struct Posted {
    std::vector<int> sends, recvs;  // micro-batches, in posting order
  };
  std::map<std::tuple<int, int, bool>, Posted> channels;  // (from, to, gradient?)
  struct Ticket {
    std::tuple<int, int, bool> channel;
    bool send;
    size_t index;
  };
  auto matched = [&](const Ticket& t) {
    const Posted& p = channels[t.channel];
    return (t.send ? p.recvs.size() : p.sends.size()) > t.index;
  };

  std::vector<size_t> pc(size_t(stages), 0);
  std::vector<std::vector<Ticket>> waiting(static_cast<size_t>(stages));  // the group posted, not yet complete
  std::map<std::tuple<int, int, int>, long> when;               // (kind, stage, micro) -> time
  long now = 0;
  for (bool progress = true; progress;) {
    progress = false;
    for (int s = 0; s < stages; ++s) {
      auto& ops = order[size_t(s)];
      size_t& i = pc[size_t(s)];
      while (i < ops.size()) {
        const PipeAction& a = ops[i];
        if (!a.is_transfer()) {
          when[{a.kind, s, a.micro}] = ++now;
          ++i;
          progress = true;
          continue;
        }
        size_t end = i;
        while (ops[end].with_next) ++end;
        ++end;
        auto& group = waiting[size_t(s)];
        if (group.empty()) {
          for (size_t j = i; j < end; ++j) {
            const PipeAction& t = ops[j];
            const bool send = t.kind == PipeAction::SendActivation || t.kind == PipeAction::SendGradient;
            const bool gradient = t.kind == PipeAction::RecvGradient || t.kind == PipeAction::SendGradient;
            // Activations go to stage + 1, gradients to stage - 1.
            const int peer = s + ((send != gradient) ? 1 : -1);
            INFO("stage " << s << ": " << to_string(t));
            REQUIRE(peer >= 0);
            REQUIRE(peer < stages);
            const auto channel = send ? std::make_tuple(s, peer, gradient) : std::make_tuple(peer, s, gradient);
            auto& list = send ? channels[channel].sends : channels[channel].recvs;
            group.push_back({channel, send, list.size()});
            list.push_back(t.micro);
          }
          progress = true;
        }
        if (!std::all_of(group.begin(), group.end(), matched)) break;
        group.clear();
        ++now;
        i = end;
        progress = true;
      }
    }
  }
  for (int s = 0; s < stages; ++s) {
    INFO("stage " << s << " stopped at action " << pc[size_t(s)] << " of " << describe(order[size_t(s)]));
    CHECK(pc[size_t(s)] == order[size_t(s)].size());  // otherwise: deadlock
  }
  for (const auto& [channel, p] : channels) {
    INFO("from stage " << std::get<0>(channel) << " to " << std::get<1>(channel)
                       << (std::get<2>(channel) ? " (gradients)" : " (activations)"));
    CHECK(p.sends == p.recvs);  // same micro-batches, same order
  }
  // Data dependencies across stages: forward(mb) on s + 1 after forward(mb) on s; backward(mb)
  // on s after backward(mb) on s + 1.
  for (int s = 0; s + 1 < stages; ++s)
    for (int mb = 0; mb < m; ++mb) {
      INFO("stages " << s << " and " << s + 1 << ", micro-batch " << mb);
      CHECK(when.at({PipeAction::Forward, s, mb}) < when.at({PipeAction::Forward, s + 1, mb}));
      CHECK(when.at({PipeAction::Backward, s + 1, mb}) < when.at({PipeAction::Backward, s, mb}));
    }
}

}  // namespace

TEST_CASE("1F1B on each stage: every micro-batch forward then backward once, in order, warm-up and peak as documented") {
  for (int stages = 1; stages <= kMaxStages; ++stages)
    for (int m = 1; m <= kMaxMicro; ++m)
      for (int stage = 0; stage < stages; ++stage) check_stage(stage, stages, m);
}

TEST_CASE("1F1B across stages: sends and receives match up, in order, without deadlock") {
  for (int stages = 1; stages <= kMaxStages; ++stages)
    for (int m = 1; m <= kMaxMicro; ++m) check_pipeline(stages, m);
}

TEST_CASE("1F1B worked example: stage 1 of 4, 6 micro-batches") {
  // Two warm-up forwards, four 1F1B steps, two cool-down backwards.
  CHECK(pipeline_in_flight(1, 4, 6) == 3);
  const std::string expected =
      "recvA0 F0 sendA0 recvA1 F1 sendA1 recvA2 F2 sendA2+ recvG0 B0 sendG0+ recvA3 F3 sendA3+ recvG1 B1 sendG1+ "
      "recvA4 F4 sendA4+ recvG2 B2 sendG2+ recvA5 F5 sendA5+ recvG3 B3 sendG3 recvG4 B4 sendG4 recvG5 B5 sendG5 ";
  CHECK(describe(one_f_one_b_order(1, 4, 6)) == expected);
  // One stage: forward and backward alternate, nothing crosses a boundary.
  CHECK(describe(one_f_one_b_order(0, 1, 3)) == "F0 B0 F1 B1 F2 B2 ");
}
