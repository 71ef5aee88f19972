#pragma once
// One rank per GPU. Two ranks driving one GPU is a launch mistake (more tasks per node than GPUs,
// or every task given CUDA_VISIBLE_DEVICES=0) that NCCL reports only as "invalid usage" from
// ncclCommInitRank, its reason ("Duplicate GPU detected") printed only under NCCL_DEBUG=WARN; and
// the ranks would share the GPU's memory, which `loom plan` gives each of them whole. Loom refuses
// it at start-up, before any communicator is made, naming the ranks, the node and the way out.
#include <string>
#include <vector>

#include "kernels/backend.hpp"
#include "parallel/mpi_communicator.hpp"
#include "parallel/process_groups.hpp"

namespace loom {

// What each rank drives: its host, its CUDA device number and that device's UUID ("" for none).
struct RankGpu {
  std::string host;
  int device = 0;
  std::string uuid;
};

// "" if no two ranks share a UUID (ranks without one are skipped); otherwise the error for the
// first rank whose GPU an earlier rank drives: both ranks, the GPU, the node, how many ranks the
// node runs on how many GPUs, and what to launch instead. `ranks` is in world rank order.
std::string shared_gpu_error(const std::vector<RankGpu>& ranks);

// The string each rank sends ("DEVICE\tUUID\tHOST") and what the gathered strings read back as.
std::string rank_gpu_line(const RankGpu& g);
RankGpu parse_rank_gpu_line(const std::string& line);

// Every rank's RankGpu (this host, `device`, `uuid`: the backend's device_uuid()) gathered over
// `world`, then shared_gpu_error; throws it on every rank alike (so a caller inside an agreement
// gets the same error everywhere). Collective over `world`.
void check_one_rank_per_gpu(parallel::MpiCommunicator& world, int device, const std::string& uuid);

// Device buffers (a backend with a stream: CUDA) travel over NCCL communicators ordered after that
// stream, once every rank is known to drive a GPU of its own; host buffers (CPU) stay on MPI.
// Collective over the world; does nothing for a backend without a stream.
void use_device_communicators(parallel::ProcessGroups& groups, Backend& backend, int device);

}  // namespace loom
