#include "parallel/hierarchical_allreduce.hpp"

#include <memory>

#include "parallel/mpi_check.hpp"

namespace loom::parallel {

NodeSplit::NodeSplit(MPI_Comm group, int ranks_per_node) : ranks_per_node_(ranks_per_node) {
  int rank = 0;
  MPI_Comm_rank(group, &rank);
  if (ranks_per_node > 0)
    mpi_check(MPI_Comm_split(group, rank / ranks_per_node, rank, &node_), "MPI_Comm_split (node)");
  else
    mpi_check(MPI_Comm_split_type(group, MPI_COMM_TYPE_SHARED, rank, MPI_INFO_NULL, &node_),
              "MPI_Comm_split_type (node)");
  int node_rank = 0;
  MPI_Comm_rank(node_, &node_rank);
  MPI_Comm_size(node_, &node_size_);
  const int leader = node_rank == 0 ? 1 : 0;
  mpi_check(MPI_Comm_split(group, leader ? 0 : MPI_UNDEFINED, rank, &leaders_), "MPI_Comm_split (leaders)");
  mpi_check(MPI_Allreduce(&leader, &nodes_, 1, MPI_INT, MPI_SUM, group), "MPI_Allreduce (nodes)");
}

NodeSplit::~NodeSplit() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (finalized) return;
  if (leaders_ != MPI_COMM_NULL) MPI_Comm_free(&leaders_);
  if (node_ != MPI_COMM_NULL) MPI_Comm_free(&node_);
}

namespace {

// The three steps on raw elements of dtype t; `mpi_op` combines them inside the node.
void hierarchical_core(const NodeSplit& s, void* buf, size_t n, DType t, MPI_Datatype mt, MPI_Op mpi_op,
                       ReduceOp op, const RingOptions& o) {
  const int count = mpi_count(n, "elements");
  const bool leader = s.leaders() != MPI_COMM_NULL;
  if (s.node_size() > 1) {
    if (leader) mpi_check(MPI_Reduce(MPI_IN_PLACE, buf, count, mt, mpi_op, 0, s.node()), "MPI_Reduce (node)");
    else mpi_check(MPI_Reduce(buf, nullptr, count, mt, mpi_op, 0, s.node()), "MPI_Reduce (node)");
  }
  // The ring's own element handling (HalfReduce::UserOp semantics for halves: rounds per combine).
  if (leader) ring_all_reduce(s.leaders(), TypedPtr(buf, t), n, op, HalfReduce::UserOp, o);
  if (s.node_size() > 1) mpi_check(MPI_Bcast(buf, count, mt, 0, s.node()), "MPI_Bcast (node)");
}

}  // namespace

void hierarchical_all_reduce(const NodeSplit& s, TypedPtr buf, size_t n, ReduceOp op, HalfReduce how,
                             const HalfOps& ops, const RingOptions& o) {
  check_reduce_dtype(buf.dtype, "hierarchical_all_reduce");
  if (n == 0) return;
  const MPI_Op fop = op == ReduceOp::Sum ? MPI_SUM : MPI_MAX;
  if (buf.dtype == DType::f32) {
    hierarchical_core(s, buf.data, n, DType::f32, MPI_FLOAT, fop, op, o);
  } else if (how == HalfReduce::UserOp) {
    hierarchical_core(s, buf.data, n, buf.dtype, MPI_UINT16_T, ops.get(buf.dtype, op), op, o);
  } else {
    std::unique_ptr<float[]> f(new float[n]);
    widen_to_fp32(buf, f.get(), n);
    hierarchical_core(s, f.get(), n, DType::f32, MPI_FLOAT, fop, op, o);
    narrow_from_fp32(f.get(), buf, n);
  }
}

}  // namespace loom::parallel
