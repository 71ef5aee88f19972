#include "engine/train/one_rank_per_gpu.hpp"

#include <unistd.h>

#include <map>
#include <set>
#include <stdexcept>

#include "parallel/host_collectives.hpp"

namespace loom {

std::string shared_gpu_error(const std::vector<RankGpu>& ranks) {
  std::map<std::string, int> first_on;  // UUID -> the first rank driving it
  for (int r = 0; r < int(ranks.size()); ++r) {
    const RankGpu& me = ranks[size_t(r)];
    if (me.uuid.empty()) continue;
    const auto [it, fresh] = first_on.emplace(me.uuid, r);
    if (fresh) continue;
    // The node's ranks and the GPUs they drive between them.
    int on_node = 0;
    std::set<std::string> gpus;
    for (const RankGpu& o : ranks)
      if (o.host == me.host) {
        ++on_node;
        if (!o.uuid.empty()) gpus.insert(o.uuid);
      }
    const int other = it->second;
    const std::string n = std::to_string(gpus.size());
    const int d0 = ranks[size_t(other)].device, d1 = me.device;  // renumbered by CUDA_VISIBLE_DEVICES, maybe
    const std::string devices = d0 == d1 ? "CUDA device " + std::to_string(d0) + " in both"
                                         : "CUDA devices " + std::to_string(d0) + " and " + std::to_string(d1);
    return "ranks " + std::to_string(other) + " and " + std::to_string(r) + " both drive GPU " + me.uuid + " (" +
           devices + ", on " + me.host + "): Loom runs one rank per GPU, and " + me.host + " has " +
           std::to_string(on_node) + " ranks on " + n + " GPU" + (gpus.size() == 1 ? "" : "s") +
           " between them. Start as many ranks per node " +
           "as it has GPUs (srun --ntasks-per-node=GPUS --gpus-per-node=GPUS, or mpirun --map-by ppr:GPUS:node), " +
           "and do not give every task the same CUDA_VISIBLE_DEVICES";
  }
  return "";
}

std::string rank_gpu_line(const RankGpu& g) {
  return std::to_string(g.device) + "\t" + g.uuid + "\t" + g.host;  // a host name has no tab
}

RankGpu parse_rank_gpu_line(const std::string& line) {
  const size_t a = line.find('\t'), b = a == std::string::npos ? a : line.find('\t', a + 1);
  if (b == std::string::npos) throw std::runtime_error("one_rank_per_gpu: malformed line '" + line + "'");
  return {line.substr(b + 1), std::stoi(line.substr(0, a)), line.substr(a + 1, b - a - 1)};
}

void check_one_rank_per_gpu(parallel::MpiCommunicator& world, int device, const std::string& uuid) {
  char host[256] = {};
  gethostname(host, sizeof host - 1);
  std::vector<RankGpu> ranks;
  for (const std::string& line : parallel::all_gather_strings(world, rank_gpu_line({host, device, uuid})))
    ranks.push_back(parse_rank_gpu_line(line));
  if (const std::string error = shared_gpu_error(ranks); !error.empty()) throw std::runtime_error(error);
}

void use_device_communicators(parallel::ProcessGroups& groups, Backend& backend, int device) {
  if (!backend.stream()) return;
  check_one_rank_per_gpu(groups.world(), device, backend.device_uuid());
  groups.use_nccl(device, backend.stream());
}

}  // namespace loom
