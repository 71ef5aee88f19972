#include "engine/train/rank_reports.hpp"

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <stdexcept>

#include "engine/optim/owned_pieces.hpp"
#include "engine/util/crc32c.hpp"
#include "engine/util/host_memory.hpp"
#include "parallel/host_collectives.hpp"
#include "parallel/pipeline_schedule.hpp"

namespace loom {

std::vector<std::string> gather_hostnames(parallel::ProcessGroups& groups) {
  char host[64] = {};
  gethostname(host, sizeof host - 1);
  return parallel::all_gather_strings(groups.world(), host);
}

RankReports::RankReports(parallel::ProcessGroups& groups, bool gpu, const std::string& gpu_pci_bus_id)
    : groups_(groups), rank_(groups.world_rank()), world_(groups.layout().world()) {
  if (!gpu) return;
  if (gpu_pci_bus_id.empty()) {
    if (rank_ == 0) std::fprintf(stderr, "loom: no GPU health metrics: the backend reports no PCI bus id\n");
    return;
  }
  nvml_ = std::make_unique<NvmlProbe>(gpu_pci_bus_id);
  if (!nvml_->available() && rank_ == 0)
    std::fprintf(stderr, "loom: no GPU health metrics: %s\n", nvml_->why_not().c_str());
}

RankReports::~RankReports() = default;

RankHealth RankReports::gather_health(double step_s) {
  constexpr size_t kF = 8;
  const HostMemory mem = host_memory();
  std::vector<float> all(size_t(world_) * kF, 0.0f);
  float* mine = all.data() + size_t(rank_) * kF;
  mine[0] = float(step_s * 1e3);
  mine[1] = float(mem.rss_mb);
  mine[2] = float(mem.peak_mb);
  if (nvml_ && nvml_->available()) {
    const GpuHealth g = nvml_->read();
    mine[3] = 1;
    mine[4] = float(g.util_pct);
    mine[5] = float(g.mem_used_mb);
    mine[6] = float(g.power_w);
    mine[7] = float(g.temp_c);
  }
  groups_.world().all_gather(all.data(), std::vector<size_t>(size_t(world_), kF));
  RankHealth h;
  h.gpu = true;
  h.gpu_util_min_pct = 100;
  std::vector<double> times;
  for (int i = 0; i < world_; ++i) {
    const float* m = all.data() + size_t(i) * kF;
    times.push_back(m[0]);
    if (m[0] > h.slowest_ms) {
      h.slowest_ms = m[0];
      h.slowest_rank = i;
    }
    h.rss_mb = std::max(h.rss_mb, double(m[1]));
    h.peak_rss_mb = std::max(h.peak_rss_mb, double(m[2]));
    h.gpu = h.gpu && m[3] == 1;
    h.gpu_util_min_pct = std::min(h.gpu_util_min_pct, double(m[4]));
    h.gpu_mem_max_mb = std::max(h.gpu_mem_max_mb, double(m[5]));
    h.gpu_power_max_w = std::max(h.gpu_power_max_w, double(m[6]));
    h.gpu_temp_max_c = std::max(h.gpu_temp_max_c, double(m[7]));
  }
  std::sort(times.begin(), times.end());
  // The median of an even count is the mean of the two middle times (the upper one alone is the
  // slowest of 2 ranks, which would show a straggler lag of 0 whatever the gap).
  const size_t mid = times.size() / 2;
  h.median_ms = times.size() % 2 ? times[mid] : 0.5 * (times[mid - 1] + times[mid]);
  h.step_ms = step_s * 1e3;
  return h;
}

nlohmann::json RankReports::report_memory(const Gpt& model, const DistributedOptimizer& optim, int micro_steps,
                                          const std::string& when) {
  constexpr size_t kF = 10;
  const int n = world_;
  const auto c = groups_.coord();
  const DistributedOptimizer::Memory o = optim.memory();
  std::vector<float> all(size_t(n) * kF, 0.0f);
  float* mine = all.data() + size_t(rank_) * kF;
  const double MB = 1e6;
  mine[0] = float(c.pp);
  mine[1] = float(parallel::pipeline_in_flight(c.pp, groups_.layout().pp, micro_steps));
  mine[2] = float((model.param_bytes() + o.params) / MB);
  mine[3] = float((model.grad_bytes() + o.grads) / MB);
  mine[4] = float(o.optimizer / MB);
  mine[5] = float(o.optimizer_host / MB);
  mine[6] = float(model.activation_bytes() / MB);
  mine[7] = float(o.comm_buffers / MB);
  mine[8] = mine[2] + mine[3] + mine[4];
  mine[9] = float(host_memory().peak_mb);
  groups_.world().all_gather(all.data(), std::vector<size_t>(size_t(n), kF));
  if (rank_ != 0) return nullptr;
  std::printf("loom: memory per rank, %s (MB; model state = parameters + gradients + optimizer state on the device%s)\n",
              when.c_str(), when == "at start" ? "; ZeRO-2/3's per-unit buffers are counted from the first step on" : "");
  std::printf("loom:   %4s %5s %6s %10s %10s %10s %10s %10s %10s %10s %10s\n", "rank", "stage", "flight", "params",
              "grads", "optimizer", "opt(host)", "activation", "comm buf", "model st.", "peak RSS");
  nlohmann::json rows = nlohmann::json::array();
  for (int i = 0; i < n; ++i) {
    const float* m = all.data() + size_t(i) * kF;
    std::printf("loom:   %4d %5d %6d %10.2f %10.2f %10.2f %10.2f %10.2f %10.2f %10.2f %10.1f\n", i, int(m[0]), int(m[1]),
                m[2], m[3], m[4], m[5], m[6], m[7], m[8], m[9]);
    rows.push_back({{"rank", i}, {"stage", int(m[0])}, {"in_flight", int(m[1])}, {"params_mb", m[2]},
                    {"grads_mb", m[3]}, {"optimizer_mb", m[4]}, {"optimizer_host_mb", m[5]},
                    {"activations_mb", m[6]}, {"comm_buffers_mb", m[7]}, {"model_state_mb", m[8]},
                    {"peak_rss_mb", m[9]}});
  }
  std::fflush(stdout);
  return rows;
}

namespace {

// Whether every member of `group` holds the same bits in the parameters `which` selects: their
// CRC-32C (in flat order, a piece at a time: no host copy of the whole slice), compared through a
// rank-ordered sum (the sum of `size` equal values). Collective (ZeRO-3: over dp as well).
template <typename Which>
bool same_on_every_member(parallel::MpiCommunicator& group, const Gpt& model, Which which) {
  uint32_t crc = 0;
  model.visit_params([&](size_t begin, size_t n, const float* data) {
    // The piece as the one "owned" range, so each intersection's position in it is `at`.
    for_each_owned_piece({{begin, begin + n}}, model.table(), [&](const ParamInfo& p, size_t lo, size_t hi, size_t at) {
      if (which(p)) crc = crc32c(data + at, (hi - lo) * sizeof(float), crc);
    });
  });
  const double mine = double(crc);
  return group.sum_ordered(mine) == mine * group.size();
}

}  // namespace

void RankReports::check_replicas(const Gpt& model) {
  if (groups_.layout().tp == 1) return;
  if (!same_on_every_member(groups_.tp(), model, [](const ParamInfo& p) { return p.split == TpSplit::Replicated; }))
    throw std::runtime_error("replicated parameters (LayerNorms, wpe, row-parallel biases) differ across the "
                             "tensor-parallel group of rank " + std::to_string(rank_));
  if (rank_ == 0) std::printf("loom: replicated parameters identical on every tensor-parallel rank\n");
}

void RankReports::check_tied_embeddings(const Gpt& model) {
  parallel::MpiCommunicator* emb = groups_.embedding();
  if (!emb) return;
  if (!same_on_every_member(*emb, model, [](const ParamInfo& p) { return p.tied; }))
    throw std::runtime_error("the tied embedding copies of the first and last pipeline stages differ (rank " +
                             std::to_string(rank_) + ")");
  const auto c = groups_.coord();
  if (c.pp == 0 && c.tp == 0 && c.dp == 0)
    std::printf("loom: tied embedding identical on the first and last pipeline stages\n");
}

}  // namespace loom
