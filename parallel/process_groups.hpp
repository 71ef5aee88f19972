#pragma once
// This rank's place in the tp x dp x pp grid and a communicator for each of its groups
// (MPI_Comm_split of the world by the GridLayout arithmetic).
#include <mpi.h>

#include <memory>

#include "parallel/comm_volume.hpp"
#include "parallel/counting_communicator.hpp"
#include "parallel/grid_layout.hpp"
#include "parallel/mpi_communicator.hpp"

namespace loom::parallel {

// This rank's place among the ranks of `comm` on its node (those sharing memory with it:
// MPI_Comm_split_type, MPI's own answer, whatever the launcher). Collective over `comm`.
// ProcessGroups computes it once (local_rank()); code without one (`loom bench comm`) calls this.
struct NodeRank {
  int rank = 0, size = 1;
};
NodeRank node_rank(MPI_Comm comm);

class ProcessGroups {
 public:
  // Collective over `world`, whose size must equal layout.world(). `algo` is the all-reduce
  // algorithm of every host communicator below (MpiCommunicator::set_all_reduce_algo); the same on
  // every rank.
  ProcessGroups(MPI_Comm world, GridLayout layout, AllReduceAlgo algo = AllReduceAlgo::Auto);

  const GridLayout& layout() const { return layout_; }
  // The host communicators' all-reduce algorithm: give it to any further MpiCommunicator made over
  // these ranks (the checkpoint writer's).
  AllReduceAlgo all_reduce_algo() const { return algo_; }
  int world_rank() const { return rank_; }
  // This rank's place among the world's ranks on its node (node_rank(), computed once). The
  // device a rank drives is cuda_device_for_local_rank(local_rank()) (kernels/backend_factory.hpp):
  // the backend, NCCL (use_nccl) and NVML are all given that one.
  int local_rank() const { return local_.rank; }
  int local_size() const { return local_.size; }
  GridLayout::Coord coord() const { return layout_.coord(rank_); }
  MpiCommunicator& world() { return *world_; }
  MpiCommunicator& tp() { return *tp_; }
  MpiCommunicator& dp() { return *dp_; }
  MpiCommunicator& pp() { return *pp_; }
  // The first and last pipeline stages of this rank's (tp, dp) position, which both hold the
  // tied token embedding; null on other stages and when pp = 1.
  MpiCommunicator* embedding() { return embedding_.get(); }

  // Device buffers (the CUDA backend): NCCL communicators over the same groups, ordered after
  // `compute_stream` (docs/parallelism.md). Collective over the world. Until it is called the
  // device_*() accessors forward to the MPI communicators above (host buffers: the CPU backend).
  // A failure to select the device or make an NCCL id is agreed (every rank throws it); a failure
  // inside ncclCommInitRank ends the job (abort_job, exit 1) after printing it, because the other
  // members of that group wait inside theirs.
  void use_nccl(int device, void* compute_stream);
  // Every device_*() communicator counts what it moves (counting_communicator.hpp), across
  // use_nccl; the host accessors above (scalars, health figures, checkpoint I/O) do not count.
  Communicator& device_tp() { return *count_tp_; }
  Communicator& device_dp() { return *count_dp_; }
  Communicator& device_pp() { return *count_pp_; }
  Communicator* device_embedding() { return count_embedding_.get(); }

  // Bytes the device groups have moved since construction (comm_volume.hpp), all of them and
  // per group; a step's volume is the difference of two snapshots. Groups of one count payload
  // and no wire bytes; the embedding group is empty on ranks without one.
  CommVolume device_volume() const;
  CommVolume device_tp_volume() const { return count_tp_->volume(); }
  CommVolume device_dp_volume() const { return count_dp_->volume(); }
  CommVolume device_pp_volume() const { return count_pp_->volume(); }
  CommVolume device_embedding_volume() const { return count_embedding_ ? count_embedding_->volume() : CommVolume{}; }

 private:
  GridLayout layout_;
  AllReduceAlgo algo_ = AllReduceAlgo::Auto;
  int rank_ = 0;
  NodeRank local_;
  std::unique_ptr<MpiCommunicator> world_, tp_, dp_, pp_, embedding_;
  std::unique_ptr<Communicator> nccl_tp_, nccl_dp_, nccl_pp_, nccl_embedding_;
  // What device_*() return: over the MPI communicators, rebound to the NCCL ones by use_nccl.
  std::unique_ptr<CountingCommunicator> count_tp_, count_dp_, count_pp_, count_embedding_;
};

}  // namespace loom::parallel
