#include "engine/train/memory_check.hpp"

#include <cstdio>
#include <stdexcept>

#include "engine/plan/plan.hpp"

namespace loom {
namespace {

// MemAvailable in MB, 0 if unknown.
double available_mb() {
  std::FILE* f = std::fopen("/proc/meminfo", "r");
  if (!f) return 0;
  char line[256];
  double mb = 0;
  while (std::fgets(line, sizeof line, f)) {
    long kb = 0;
    if (std::sscanf(line, "MemAvailable: %ld kB", &kb) == 1) mb = kb / 1024.0;
  }
  std::fclose(f);
  return mb;
}

bool predict_cpu(const Recipe& r, MemoryBreakdown* m) {
  try {
    Cluster c;
    c.nodes = 1;
    c.per_node = r.world;
    c.device = device_spec("cpu");
    *m = predict(r, c).memory;
    return true;
  } catch (const std::exception&) {
    return false;  // a layout the planner does not model: no prediction, no check
  }
}

std::string breakdown(const MemoryBreakdown& m) {
  char b[320];
  std::snprintf(b, sizeof b, "parameters %.0f MB, gradients %.0f MB, optimizer state %.0f MB, activations %.0f MB",
                m.params, m.grads, m.optimizer, m.activations);
  std::string out = b;
  if (m.loading > m.step_total()) {
    // Then the peak is not the step's: say so, or the parts above do not add up to the total.
    std::snprintf(b, sizeof b, "; the peak is while the weights go in, %.0f MB (the step's is %.0f MB): one tensor's "
                  "loading buffers beside the model", m.loading, m.step_total());
    out += b;
  }
  return out;
}

const char* kAdvice =
    "lower train.micro_batch or model.seq_len, set train.recompute=selective or full, shard the optimizer state "
    "(parallel.zero=1), or spread the model over more ranks (parallel.tp, parallel.pp); `loom plan RECIPE --search` "
    "ranks the layouts that fit";

}  // namespace

double predicted_rank_mb(const Recipe& r) {
  MemoryBreakdown m;
  return predict_cpu(r, &m) ? m.total() : 0;
}

void check_host_memory_fits(const Recipe& r, int ranks_on_node) {
  MemoryBreakdown m;
  const double avail = available_mb();
  if (avail <= 0 || !predict_cpu(r, &m)) return;
  const double need = m.total() * ranks_on_node;
  if (need <= avail) return;
  char b[256];
  std::snprintf(b, sizeof b, "out of memory before training: %d rank(s) on this node need %.0f MB (loom plan: %.0f MB "
                "per rank: ", ranks_on_node, need, m.total());
  throw std::runtime_error(std::string(b) + breakdown(m) + "), the node has " + std::to_string(long(avail)) +
                           " MB available; " + kAdvice);
}

std::string allocation_failure_message(const Recipe& r, const std::string& what, int rank) {
  MemoryBreakdown m;
  std::string out = "rank " + std::to_string(rank) + ": out of memory allocating " + what;
  if (predict_cpu(r, &m)) {
    char b[128];
    std::snprintf(b, sizeof b, " (loom plan predicts %.0f MB per rank: ", m.total());
    out += b + breakdown(m) + ")";
  }
  return out + "; " + kAdvice;
}

}  // namespace loom
