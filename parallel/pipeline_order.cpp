#include "parallel/pipeline_order.hpp"

namespace loom::parallel {

std::vector<PipeAction> one_f_one_b_order(int stage, int stages, int m) {
  const int r = stage, p = stages;
  const bool first = r == 0, last = r == p - 1;
  const int warmup = std::min(p - r - 1, m), steady = m - warmup;
  std::vector<PipeAction> out;
  auto add = [&](PipeAction::Kind kind, int micro, bool with_next = false) { out.push_back({kind, micro, with_next}); };

  int next_fwd = 0, next_bwd = 0;
  for (int k = 0; k < warmup; ++k) {
    if (!first) add(PipeAction::RecvActivation, next_fwd);
    add(PipeAction::Forward, next_fwd);
    if (!last) add(PipeAction::SendActivation, next_fwd);
    ++next_fwd;
  }
  if (steady > 0 && !first) add(PipeAction::RecvActivation, next_fwd);
  for (int k = 0; k < steady; ++k) {
    add(PipeAction::Forward, next_fwd);
    // Send this output and receive the gradient for the oldest micro-batch in flight, together.
    if (!last) {
      add(PipeAction::SendActivation, next_fwd, true);
      add(PipeAction::RecvGradient, next_bwd);
    }
    ++next_fwd;
    add(PipeAction::Backward, next_bwd);
    // Send this input gradient and receive the next micro-batch's activation, together.
    if (!first) {
      const bool more = k + 1 < steady;
      add(PipeAction::SendGradient, next_bwd, more);
      if (more) add(PipeAction::RecvActivation, next_fwd);
    }
    ++next_bwd;
  }
  for (int k = 0; k < warmup; ++k) {  // cool-down
    if (!last) add(PipeAction::RecvGradient, next_bwd);
    add(PipeAction::Backward, next_bwd);
    if (!first) add(PipeAction::SendGradient, next_bwd);
    ++next_bwd;
  }
  return out;
}

std::string to_string(const PipeAction& a) {
  static const char* names[] = {"F", "B", "recvA", "sendA", "recvG", "sendG"};
  return names[a.kind] + std::to_string(a.micro) + (a.with_next ? "+" : "");
}

}  // namespace loom::parallel
