#include "parallel/pipeline_schedule.hpp"

#include <vector>

namespace loom::parallel {
namespace {
constexpr int kActivationTag = 11, kGradientTag = 12;
}  // namespace

void run_1f1b(Communicator& pp, int m, size_t elems, const StageWork& w) {
  const int r = pp.rank();
  std::vector<RequestPtr> reqs;  // transfers posted together, waited together
  for (const PipeAction& a : one_f_one_b_order(r, pp.size(), m)) {
    switch (a.kind) {
      case PipeAction::Forward: w.forward(a.micro); break;
      case PipeAction::Backward: w.backward(a.micro); break;
      case PipeAction::RecvActivation: reqs.push_back(pp.irecv(w.input(a.micro), elems, r - 1, kActivationTag)); break;
      case PipeAction::SendActivation: reqs.push_back(pp.isend(w.output(a.micro), elems, r + 1, kActivationTag)); break;
      case PipeAction::RecvGradient: reqs.push_back(pp.irecv(w.output_grad(), elems, r + 1, kGradientTag)); break;
      case PipeAction::SendGradient: reqs.push_back(pp.isend(w.input_grad(), elems, r - 1, kGradientTag)); break;
    }
    if (!a.with_next) {
      for (auto& q : reqs) q->wait();
      reqs.clear();
    }
  }
}

}  // namespace loom::parallel
