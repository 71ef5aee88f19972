#pragma once
// Hierarchical all-reduce for host buffers: reduce inside each node over shared memory
// (MPI_Reduce to the node's first rank), the ring all-reduce (ring_allreduce.hpp) among the
// nodes' first ranks ("leaders"), then a broadcast inside each node. Only the leaders touch the
// network, each once per node, so the link carries 2(nodes-1)/nodes of the buffer per node rather
// than per rank.
//
// Degenerate groupings: one rank per node (every rank a leader) is the plain ring over the group,
// with no node step; a single node is MPI_Reduce + MPI_Bcast inside it, with no ring.
//
// Numerics: the node step is MPI_Reduce's order for that node size, the leaders' step the ring's;
// both fixed for a given grouping and n, so a repeated call gives bitwise the same result, on
// every rank (the broadcast copies the leader's). bf16/fp16 UserOp rounds after each combine
// (MPI_Reduce with the HalfOps user op, then the ring's); ThroughFp32 widens once, runs the whole
// thing in fp32 and rounds once.
#include <mpi.h>

#include <cstddef>

#include "parallel/communicator.hpp"
#include "parallel/mpi_half_reduce.hpp"
#include "parallel/ring_allreduce.hpp"

namespace loom::parallel {

// How a group falls into nodes: the node communicator (its ranks on this node, in group order)
// and the leaders' communicator (each node's first rank; MPI_COMM_NULL on other ranks).
class NodeSplit {
 public:
  // Collective over `group`. ranks_per_node 0: the real nodes (MPI_Comm_split_type
  // MPI_COMM_TYPE_SHARED); k > 0: pretend group ranks [j k, (j+1) k) form node j (tests, one host).
  NodeSplit(MPI_Comm group, int ranks_per_node);
  ~NodeSplit();
  NodeSplit(const NodeSplit&) = delete;
  NodeSplit& operator=(const NodeSplit&) = delete;

  int ranks_per_node() const { return ranks_per_node_; }  // as asked (0: real nodes)
  MPI_Comm node() const { return node_; }
  MPI_Comm leaders() const { return leaders_; }  // MPI_COMM_NULL unless this rank leads its node
  int node_size() const { return node_size_; }
  int nodes() const { return nodes_; }

 private:
  int ranks_per_node_ = 0, node_size_ = 1, nodes_ = 1;
  MPI_Comm node_ = MPI_COMM_NULL, leaders_ = MPI_COMM_NULL;
};

// In place: buf (n elements: fp32, bf16, fp16) becomes the reduction over the group `s` was split
// from. Collective over that group. `ops` supplies the bf16/fp16 user ops of the node step.
void hierarchical_all_reduce(const NodeSplit& s, TypedPtr buf, size_t n, ReduceOp op, HalfReduce how,
                             const HalfOps& ops, const RingOptions& o = default_ring_options());

}  // namespace loom::parallel
