#include "parallel/pipeline_schedule.hpp"

#include <algorithm>
#include <vector>

namespace loom::parallel {
namespace {
constexpr int kActivationTag = 11, kGradientTag = 12;

void wait_all(std::vector<RequestPtr>& reqs) {
  for (auto& r : reqs) r->wait();
  reqs.clear();
}
}  // namespace

void run_1f1b(Communicator& pp, int m, size_t elems, const StageWork& w) {
  const int r = pp.rank(), p = pp.size();
  const bool first = r == 0, last = r == p - 1;
  const int warmup = std::min(p - r - 1, m), steady = m - warmup;
  std::vector<RequestPtr> reqs;

  auto recv_forward = [&](int i) {
    if (!first) pp.irecv(w.input(i), elems, r - 1, kActivationTag)->wait();
  };
  auto send_forward = [&](int i) {
    if (!last) pp.isend(w.output(i), elems, r + 1, kActivationTag)->wait();
  };
  auto recv_backward = [&] {
    if (!last) pp.irecv(w.output_grad(), elems, r + 1, kGradientTag)->wait();
  };
  auto send_backward = [&] {
    if (!first) pp.isend(w.input_grad(), elems, r - 1, kGradientTag)->wait();
  };

  int next_fwd = 0, next_bwd = 0;
  for (int k = 0; k < warmup; ++k) {
    recv_forward(next_fwd);
    w.forward(next_fwd);
    send_forward(next_fwd);
    ++next_fwd;
  }
  if (steady > 0) recv_forward(next_fwd);
  for (int k = 0; k < steady; ++k) {
    w.forward(next_fwd);
    // Send this output and receive the gradient for the oldest micro-batch in flight, together.
    if (!last) {
      reqs.push_back(pp.isend(w.output(next_fwd), elems, r + 1, kActivationTag));
      reqs.push_back(pp.irecv(w.output_grad(), elems, r + 1, kGradientTag));
      wait_all(reqs);
    }
    ++next_fwd;
    w.backward(next_bwd++);
    if (k + 1 < steady) {
      // Send this input gradient and receive the next micro-batch's activation, together.
      if (!first) {
        reqs.push_back(pp.isend(w.input_grad(), elems, r - 1, kGradientTag));
        reqs.push_back(pp.irecv(w.input(next_fwd), elems, r - 1, kActivationTag));
        wait_all(reqs);
      }
    } else {
      send_backward();
    }
  }
  for (int k = 0; k < warmup; ++k) {  // cool-down
    recv_backward();
    w.backward(next_bwd++);
    send_backward();
  }
}

}  // namespace loom::parallel
