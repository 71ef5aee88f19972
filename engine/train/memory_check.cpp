#include "engine/train/memory_check.hpp"

#include <cstdio>
#include <stdexcept>
#include <utility>

#include "engine/plan/plan.hpp"
#include "engine/util/memory_room.hpp"

namespace loom {
namespace {

// The plan's memory per rank on `device` ("cpu": this machine; any GPU spec for the CUDA backend:
// their memory models differ only in capacity, which is not used here).
bool predict_memory(const Recipe& r, const char* device, MemoryBreakdown* m) {
  try {
    Cluster c;
    c.nodes = 1;
    c.per_node = r.world;
    c.device = device_spec(device);
    *m = predict(r, c).memory;
    return true;
  } catch (const std::exception&) {
    return false;  // a layout the planner does not model: no prediction, no check
  }
}

// The prediction's parts, every one that is not zero, so that they add up to its total.
std::string breakdown(const MemoryBreakdown& m) {
  const std::pair<const char*, double> parts[] = {
      {"parameters", m.params},
      {"gradients", m.grads},
      {"optimizer state", m.optimizer + (m.host_is_device ? m.optimizer_host : 0)},
      {"activations", m.activations},
      {"communication buffers", m.comm_buffers},
      {"workspace", m.workspace},
      {"host staging (initial parameters, checkpoint snapshot)", m.staging},
      {"runtime", m.runtime}};
  std::string out;
  char b[320];
  for (const auto& [name, mb] : parts) {
    if (mb < 0.5) continue;
    std::snprintf(b, sizeof b, "%s%s %.0f MB", out.empty() ? "" : ", ", name, mb);
    out += b;
  }
  if (m.loading > m.step_total()) {
    // Then the peak is not the step's: say so, or the parts above do not add up to the total.
    std::snprintf(b, sizeof b, "; the peak is while the weights go in, %.0f MB (the step's is %.0f MB): one tensor's "
                  "loading buffers beside the model", m.loading, m.step_total());
    out += b;
  }
  return out;
}

// What to change, for this recipe: sharding is suggested only up to the ZeRO stage not yet used.
std::string advice(const Recipe& r) {
  const int zero = r.parallel.zero;
  const std::string shard = zero == 0   ? "shard the optimizer state (parallel.zero=1), "
                            : zero < 3 ? "shard more of the model state (parallel.zero=" +
                                             std::string(zero == 1 ? "2 or 3" : "3") + "), "
                                       : "";
  return "lower train.micro_batch or model.seq_len, set train.recompute=selective or full, " + shard +
         "or spread the model over more ranks (parallel.tp, parallel.pp" + (zero > 0 ? "; with ZeRO, more nodes" : "") +
         "); `loom plan RECIPE --search` ranks the layouts that fit";
}

}  // namespace

double predicted_rank_mb(const Recipe& r) {
  MemoryBreakdown m;
  return predict_memory(r, "cpu", &m) ? m.total() : 0;
}

void check_host_memory_fits(const Recipe& r, int ranks_on_node, const MemoryRoom& room) {
  MemoryBreakdown m;
  if (!room.known() || !predict_memory(r, "cpu", &m)) return;
  const double need = m.total() * ranks_on_node;
  if (need <= room.mb) return;
  char b[256];
  std::snprintf(b, sizeof b, "out of memory before training: %d rank(s) on this node need %.0f MB (loom plan: %.0f MB "
                "per rank: ", ranks_on_node, need, m.total());
  throw std::runtime_error(std::string(b) + breakdown(m) + "); " + room.where + "; " + advice(r));
}

std::string allocation_failure_message(const Recipe& r, const std::string& what, int rank, const std::string& cause,
                                       bool gpu) {
  MemoryBreakdown m;
  std::string out = "rank " + std::to_string(rank) + ": out of memory allocating " + what;
  if (!cause.empty()) out += ": " + cause;
  if (predict_memory(r, gpu ? "h100-80g" : "cpu", &m)) {
    char b[128];
    std::snprintf(b, sizeof b, " (loom plan predicts %.0f MB per rank: ", m.total());
    out += b + breakdown(m) + ")";
  }
  return out + "; " + advice(r);
}

}  // namespace loom
