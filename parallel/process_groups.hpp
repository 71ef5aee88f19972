#pragma once
// This rank's place in the tp x dp x pp grid and a communicator for each of its groups
// (MPI_Comm_split of the world by the GridLayout arithmetic).
#include <mpi.h>

#include <memory>

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
  // Collective over `world`, whose size must equal layout.world().
  ProcessGroups(MPI_Comm world, GridLayout layout);

  const GridLayout& layout() const { return layout_; }
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
  // device_*() accessors return the MPI communicators above (host buffers: the CPU backend).
  void use_nccl(int device, void* compute_stream);
  Communicator& device_tp() { return nccl_tp_ ? *nccl_tp_ : static_cast<Communicator&>(*tp_); }
  Communicator& device_dp() { return nccl_dp_ ? *nccl_dp_ : static_cast<Communicator&>(*dp_); }
  Communicator& device_pp() { return nccl_pp_ ? *nccl_pp_ : static_cast<Communicator&>(*pp_); }
  Communicator* device_embedding() {
    if (nccl_embedding_) return nccl_embedding_.get();
    return embedding_.get();
  }

 private:
  GridLayout layout_;
  int rank_ = 0;
  NodeRank local_;
  std::unique_ptr<MpiCommunicator> world_, tp_, dp_, pp_, embedding_;
  std::unique_ptr<Communicator> nccl_tp_, nccl_dp_, nccl_pp_, nccl_embedding_;
};

}  // namespace loom::parallel
