#pragma once
// What the ranks tell each other about themselves, beyond training: step time, memory and GPU
// health at each log step (the straggler view), the memory report at the end, and the checks
// that copies meant to be identical are (tp replicas, the tied embedding's two stages). Every
// call is collective over the world (or the group named); rank 0 prints.
#include <memory>

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "engine/metrics/nvml_probe.hpp"
#include "engine/model/gpt.hpp"
#include "engine/optim/distributed_optimizer.hpp"
#include "parallel/process_groups.hpp"

namespace loom {

// What rank 0 logs about every rank at each log step.
struct RankHealth {
  double step_ms = 0, rss_mb = 0, peak_rss_mb = 0;
  int slowest_rank = 0;
  double slowest_ms = 0, median_ms = 0;
  bool gpu = false;  // GPU fields below valid (NVML on every rank)
  double gpu_util_min_pct = 0, gpu_mem_max_mb = 0, gpu_power_max_w = 0, gpu_temp_max_c = 0;
};

// Every rank's host name, in world rank order. Collective over the world.
std::vector<std::string> gather_hostnames(parallel::ProcessGroups& groups);

class RankReports {
 public:
  // `gpu`: read the health of the GPU at `gpu_pci_bus_id` through NVML (the device the backend
  // drives, Backend::device_pci_bus_id()).
  RankReports(parallel::ProcessGroups& groups, bool gpu, const std::string& gpu_pci_bus_id);
  ~RankReports();

  // Step time, host memory and GPU health of every rank, gathered to all: the slowest rank and
  // its lag behind the median are the stragglers to look at.
  RankHealth gather_health(double step_s);
  // Per rank: pipeline stage, micro-batches in flight, and the bytes of parameters, gradients,
  // optimizer state (device and, offloaded, host), activations, communication buffers, the model
  // state (parameters + gradients + optimizer state on the device; ZeRO-2/3's per-unit buffers at
  // their peak so far) and the process's peak RSS. Printed by rank 0 under the heading `when`
  // ("at start", "at the end"), which also gets the rows as JSON (null elsewhere) for run.json.
  nlohmann::json report_memory(const Gpt& model, const DistributedOptimizer& optim, int micro_steps,
                               const std::string& when);
  // Tensors replicated over tp get identical updates by construction: verifies the parameters
  // really agree (throws naming the rank otherwise).
  void check_replicas(const Gpt& model);
  // The tied embedding's copies on the first and last pipeline stages are identical.
  void check_tied_embeddings(const Gpt& model);

 private:
  parallel::ProcessGroups& groups_;
  int rank_, world_;
  std::unique_ptr<NvmlProbe> nvml_;
};

}  // namespace loom
