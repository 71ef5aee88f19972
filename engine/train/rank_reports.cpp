#include "engine/train/rank_reports.hpp"

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <stdexcept>

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
  h.median_ms = times[times.size() / 2];
  h.step_ms = step_s * 1e3;
  return h;
}

void RankReports::report_memory(const Gpt& model, const DistributedOptimizer& optim, int micro_steps) {
  const int n = world_;
  const auto c = groups_.coord();
  std::vector<float> all(size_t(n) * 5, 0.0f);
  float* mine = all.data() + size_t(rank_) * 5;
  mine[0] = float(c.pp);
  mine[1] = float(parallel::pipeline_in_flight(c.pp, groups_.layout().pp, micro_steps));
  mine[2] = float(model.activation_bytes() / 1e6);
  mine[3] = float(optim.state_bytes() / 1e6);
  mine[4] = float(host_memory().peak_mb);
  groups_.world().all_gather(all.data(), std::vector<size_t>(size_t(n), 5));
  if (rank_ != 0) return;
  std::printf("loom: memory per rank (activations: micro-batches in flight x one micro-batch's activations)\n");
  for (int i = 0; i < n; ++i) {
    const float* m = all.data() + size_t(i) * 5;
    std::printf("loom:   rank %d stage %d: %d in flight, activations %.2f MB, optimizer state %.2f MB, peak RSS "
                "%.1f MB\n",
                i, int(m[0]), int(m[1]), m[2], m[3], m[4]);
  }
}

namespace {

// Whether every member of `group` holds the same bits in the parameters `which` selects: their
// CRC-32C, compared through a rank-ordered sum (the sum of `size` equal values). Collective.
template <typename Which>
bool same_on_every_member(parallel::MpiCommunicator& group, const Gpt& model, Which which) {
  std::vector<float> host(model.num_params());
  model.get_params(host.data());
  uint32_t crc = 0;
  for (const ParamInfo& p : model.table().params())
    if (which(p)) crc = crc32c(host.data() + p.offset, p.numel * sizeof(float), crc);
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
