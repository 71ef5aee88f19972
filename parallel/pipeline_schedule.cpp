#include "parallel/pipeline_schedule.hpp"

#include <vector>

namespace loom::parallel {
namespace {
constexpr int kActivationTag = 11, kGradientTag = 12;
}  // namespace

void run_1f1b(Communicator& pp, int m, size_t elems, const StageWork& w) {
  const int r = pp.rank();
  std::vector<Transfer> batch;  // transfers posted together (one group under NCCL), waited together
  for (const PipeAction& a : one_f_one_b_order(r, pp.size(), m)) {
    switch (a.kind) {
      case PipeAction::Forward: w.forward(a.micro); break;
      case PipeAction::Backward: w.backward(a.micro); break;
      case PipeAction::RecvActivation: batch.push_back(Transfer::from(w.input(a.micro), elems, r - 1, kActivationTag)); break;
      case PipeAction::SendActivation: batch.push_back(Transfer::to(w.output(a.micro), elems, r + 1, kActivationTag)); break;
      case PipeAction::RecvGradient: batch.push_back(Transfer::from(w.output_grad(), elems, r + 1, kGradientTag)); break;
      case PipeAction::SendGradient: batch.push_back(Transfer::to(w.input_grad(), elems, r - 1, kGradientTag)); break;
    }
    if (!a.with_next && !batch.empty()) {
      pp.itransfers(batch)->wait();
      batch.clear();
    }
  }
}

}  // namespace loom::parallel
