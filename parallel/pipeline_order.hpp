#pragma once
// The order of the non-interleaved 1F1B pipeline schedule (PipeDream-Flush, as in Megatron-LM)
// on one stage, as data: what run_1f1b (pipeline_schedule.hpp) executes, and what
// tests/unit/test_pipeline_order.cpp checks for every small (stages, micro-batches). Pure
// arithmetic, no MPI: part of loom_grid.
//
// Stage r of p with m micro-batches: min(p - r - 1, m) warm-up forwards, then alternately one
// forward and one backward, then the remaining backwards. So stage r holds at most
// min(p - r, m) micro-batches' activations. Paired transfers (send this, receive that) are
// posted together, non-blocking, and waited together, so neighbours never deadlock on each
// other's sends.
#include <algorithm>
#include <string>
#include <vector>

namespace loom::parallel {

// Peak number of micro-batches whose activations the stage holds at once.
inline int pipeline_in_flight(int stage, int stages, int micro_batches) {
  return std::min(stages - stage, micro_batches);
}

struct PipeAction {
  enum Kind {
    Forward,         // forward of `micro` on this stage
    Backward,        // backward of `micro`
    RecvActivation,  // from stage - 1: the input of `micro`
    SendActivation,  // to stage + 1: the output of `micro`
    RecvGradient,    // from stage + 1: the gradient of `micro`'s output
    SendGradient,    // to stage - 1: the gradient of `micro`'s input
  };
  Kind kind;
  int micro;
  // Transfers only: posted together with the next action (a transfer too) and waited together
  // with it. A transfer without it is waited on before the next action starts.
  bool with_next = false;

  bool is_transfer() const { return kind != Forward && kind != Backward; }
  bool operator==(const PipeAction& o) const {
    return kind == o.kind && micro == o.micro && with_next == o.with_next;
  }
};

// Every action of stage `stage` of `stages` for one global batch of `micro_batches`, in order.
// The first stage receives no activations and sends no gradients; the last sends no activations
// and receives no gradients.
std::vector<PipeAction> one_f_one_b_order(int stage, int stages, int micro_batches);

// "F0", "B3", "recvA0", "sendG2+" ('+': posted with the next one), for test messages.
std::string to_string(const PipeAction& a);

}  // namespace loom::parallel
