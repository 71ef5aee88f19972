#include "parallel/process_groups.hpp"

#include <cstdio>
#include <exception>
#include <stdexcept>
#include <string>

#include "parallel/bounded_abort.hpp"
#include "parallel/mpi_world.hpp"
#include "parallel/nccl_communicator.hpp"

namespace loom::parallel {
namespace {
std::unique_ptr<MpiCommunicator> split(MPI_Comm world, int color, int key, const char* name) {
  MPI_Comm c;
  if (MPI_Comm_split(world, color, key, &c) != MPI_SUCCESS) throw std::runtime_error("MPI_Comm_split failed");
  if (c == MPI_COMM_NULL) return nullptr;  // MPI_UNDEFINED colour: not in any such group
  auto comm = std::make_unique<MpiCommunicator>(c, name);  // duplicates c
  MPI_Comm_free(&c);
  return comm;
}
}  // namespace

NodeRank node_rank(MPI_Comm comm) {
  // The ranks of this node, in the order of their ranks in `comm`.
  int rank = 0;
  MPI_Comm_rank(comm, &rank);
  MPI_Comm node;
  if (MPI_Comm_split_type(comm, MPI_COMM_TYPE_SHARED, rank, MPI_INFO_NULL, &node) != MPI_SUCCESS)
    throw std::runtime_error("MPI_Comm_split_type(MPI_COMM_TYPE_SHARED) failed");
  NodeRank out;
  MPI_Comm_rank(node, &out.rank);
  MPI_Comm_size(node, &out.size);
  MPI_Comm_free(&node);
  return out;
}

ProcessGroups::ProcessGroups(MPI_Comm world, GridLayout layout, AllReduceAlgo algo) : layout_(layout), algo_(algo) {
  int size = 0;
  MPI_Comm_rank(world, &rank_);
  MPI_Comm_size(world, &size);
  if (size != layout.world())
    throw std::runtime_error("process grid tp=" + std::to_string(layout.tp) + " x dp=" + std::to_string(layout.dp) +
                             " x pp=" + std::to_string(layout.pp) + " needs " + std::to_string(layout.world()) +
                             " ranks, the world has " + std::to_string(size));
  local_ = node_rank(world);
  const auto c = layout.coord(rank_);
  world_ = split(world, 0, rank_, "world");
  tp_ = split(world, c.pp * layout.dp + c.dp, c.tp, "tensor-parallel");
  dp_ = split(world, c.pp * layout.tp + c.tp, c.dp, "data-parallel");
  pp_ = split(world, c.dp * layout.tp + c.tp, c.pp, "pipeline");
  const bool holds_embedding = layout.pp > 1 && (c.pp == 0 || c.pp == layout.pp - 1);
  embedding_ = split(world, holds_embedding ? c.dp * layout.tp + c.tp : MPI_UNDEFINED, c.pp, "tied-embedding");
  for (MpiCommunicator* c : {world_.get(), tp_.get(), dp_.get(), pp_.get(), embedding_.get()})
    if (c) c->set_all_reduce_algo(algo);
  count_tp_ = std::make_unique<CountingCommunicator>(*tp_);
  count_dp_ = std::make_unique<CountingCommunicator>(*dp_);
  count_pp_ = std::make_unique<CountingCommunicator>(*pp_);
  if (embedding_) count_embedding_ = std::make_unique<CountingCommunicator>(*embedding_);
}

void ProcessGroups::use_nccl(int device, void* compute_stream) {
  // One NCCL communicator per group this rank belongs to, bootstrapped over the group's MPI
  // communicator; every rank creates them in the same order (tp, dp, pp, embedding).
  MpiCommunicator* groups[] = {tp_.get(), dp_.get(), pp_.get(), embedding_.get()};
  std::unique_ptr<Communicator>* made[] = {&nccl_tp_, &nccl_dp_, &nccl_pp_, &nccl_embedding_};
  // The local half first, for all groups at once, agreed over the world: a rank whose GPU or NCCL
  // fails here fails the job on every rank with its message, where it used to leave the members
  // of its groups waiting in the id's broadcast. Over the world, not per group: a rank whose own
  // groups all passed would otherwise go on into its next group's bootstrap and wait there.
  NcclId ids[4];
  agreed(*world_, [&] {
    for (int g = 0; g < 4; ++g)
      ids[g] = nccl_prepare(device, groups[g] && groups[g]->rank() == 0);
  }, "NCCL set-up: ");
  // The collective half. A failure in it cannot be agreed on: the group's other members wait
  // inside ncclCommInitRank, which nothing but an abort ends. So it ends the job, with its reason.
  try {
    for (int g = 0; g < 4; ++g)
      if (groups[g])
        *made[g] = make_nccl_communicator(groups[g]->comm(), ids[g], device, compute_stream,
                                          groups[g]->name() + " (NCCL)");
  } catch (const std::exception& e) {
    std::fprintf(stderr, "loom: rank %d: NCCL set-up: %s (the other ranks wait inside NCCL's: ending the job)\n",
                 rank_, e.what());
    std::fflush(stderr);
    abort_job(1);
  }
  // The counters stay: a group's volume is the same whichever communicator carries it.
  count_tp_->rebind(*nccl_tp_);
  count_dp_->rebind(*nccl_dp_);
  count_pp_->rebind(*nccl_pp_);
  if (count_embedding_) count_embedding_->rebind(*nccl_embedding_);
}

CommVolume ProcessGroups::device_volume() const {
  return device_tp_volume() + device_dp_volume() + device_pp_volume() + device_embedding_volume();
}

}  // namespace loom::parallel
