// `loom plan`'s text: one prediction in full (memory breakdown, step time) and the ranked table
// of a layout search. The arithmetic is plan.cpp's.
#include "engine/plan/plan.hpp"

#include <cstdio>
#include <sstream>

namespace loom {

std::string format_prediction(const Recipe& r, const Cluster& c, const Prediction& p) {
  char b[4096];
  std::ostringstream os;
  std::snprintf(b, sizeof b,
                "plan: %d layers, d_model %d, %d heads, seq %d, vocab %d | %d node(s) x %d %s = %d ranks\n"
                "layout: tp %d x pp %d x dp %d, micro-batch %d x %d accumulation steps = global batch %d, zero %d, "
                "recompute %s, precision %s\n",
                r.model.n_layer, r.model.d_model, r.model.n_head, r.model.seq_len, r.model.vocab_size, c.nodes,
                c.per_node, c.device.name.c_str(), c.world(), p.tp, p.pp, p.dp, p.micro_batch, p.grad_accum,
                p.micro_batch * p.grad_accum * p.dp, p.zero, p.recompute.c_str(), r.train.precision.c_str());
  os << b;
  const MemoryBreakdown& m = p.memory;
  char frozen_note[64] = "";
  if (m.frozen > 0) std::snprintf(frozen_note, sizeof frozen_note, " (frozen base %.1f)", m.frozen);
  char loading_note[96] = "";
  if (m.loading > m.step_total())
    std::snprintf(loading_note, sizeof loading_note, " (while the weights go in, a tensor at a time; %.1f in the step)",
                  m.step_total());
  std::snprintf(b, sizeof b,
                "memory per rank (largest: pipeline stage %d, %d micro-batch(es) in flight), MB:\n"
                "  parameters %.1f%s | gradients %.1f | optimizer state %.1f (host %.1f) | activations %.1f | comm "
                "buffers %.1f | workspace %.1f | host staging %.1f | runtime %.1f\n"
                "  total %.1f MB%s of %.1f GB per %s: %s\n",
                m.stage, m.in_flight, m.params, frozen_note, m.grads, m.optimizer, m.optimizer_host, m.activations, m.comm_buffers,
                m.workspace, m.staging, m.runtime, m.total(), loading_note, c.device.memory_gb, c.device.cpu ? "node" : "device",
                p.fits ? "fits" : "DOES NOT FIT");
  os << b;
  std::snprintf(b, sizeof b,
                "step: %.3g model FLOPs | compute %.1f ms, pipeline bubble %.1f ms, tp comm %.1f ms (%.1f MB), pp comm "
                "%.1f ms (%.1f MB), dp comm exposed %.1f ms (%.1f MB per rank)\n"
                "predicted: %.1f ms per step, %.0f tokens/s, MFU %.1f%%\n",
                p.flops_per_step, p.compute_s * 1e3, p.bubble_s * 1e3, p.tp_comm_s * 1e3, p.tp_bytes / 1e6,
                p.pp_comm_s * 1e3, p.pp_bytes / 1e6, p.dp_comm_exposed_s * 1e3, p.dp_bytes / 1e6, p.step_s * 1e3,
                p.tokens_per_s, 100 * p.mfu);
  os << b;
  return os.str();
}

std::string format_search(const std::vector<Prediction>& all, size_t top) {
  std::ostringstream os;
  char b[512];
  std::snprintf(b, sizeof b, "%4s %3s %3s %4s %5s %5s %4s %-9s %10s %10s %8s %6s  %s\n", "rank", "tp", "pp", "dp",
                "micro", "accum", "zero", "recompute", "mem MB", "step ms", "tok/s", "MFU%", "fits");
  os << b;
  for (size_t i = 0; i < all.size() && i < top; ++i) {
    const Prediction& p = all[i];
    std::snprintf(b, sizeof b, "%4zu %3d %3d %4d %5d %5d %4d %-9s %10.1f %10.1f %8.0f %6.1f  %s\n", i + 1, p.tp, p.pp,
                  p.dp, p.micro_batch, p.grad_accum, p.zero, p.recompute.c_str(), p.memory.total(), p.step_s * 1e3,
                  p.tokens_per_s, 100 * p.mfu, p.fits ? "yes" : "no");
    os << b;
  }
  if (all.size() > top) os << "(" << all.size() - top << " more; --top N shows more)\n";
  return os.str();
}

}  // namespace loom
