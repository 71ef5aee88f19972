#include "parallel/counting_communicator.hpp"

#include <numeric>

namespace loom::parallel {
namespace {
uint64_t bytes(DType t, uint64_t n) { return n * dtype_size(t); }
uint64_t total(const std::vector<size_t>& counts) { return std::accumulate(counts.begin(), counts.end(), uint64_t(0)); }
}  // namespace

CommVolume CountingCommunicator::volume() const {
  CommVolume v;
  for (size_t k = 0; k < kCommKinds; ++k) {
    v.payload[k] = payload_[k].load(std::memory_order_relaxed);
    v.wire[k] = wire_[k].load(std::memory_order_relaxed);
    v.calls[k] = calls_[k].load(std::memory_order_relaxed);
  }
  return v;
}

void CountingCommunicator::count(CommKind k, uint64_t payload, uint64_t wire) {
  payload_[size_t(k)].fetch_add(payload, std::memory_order_relaxed);
  wire_[size_t(k)].fetch_add(wire, std::memory_order_relaxed);
  calls_[size_t(k)].fetch_add(1, std::memory_order_relaxed);
}

void CountingCommunicator::count_all_reduce(DType t, size_t n) {
  count(CommKind::AllReduce, bytes(t, n), ring_all_reduce_bytes(n, dtype_size(t), size(), rank()));
}
void CountingCommunicator::count_reduce_scatter(DType t, const std::vector<size_t>& counts) {
  count(CommKind::ReduceScatter, bytes(t, total(counts)), ring_reduce_scatter_bytes(counts, dtype_size(t), rank()));
}
void CountingCommunicator::count_all_gather(DType t, const std::vector<size_t>& counts) {
  count(CommKind::AllGather, bytes(t, total(counts)), ring_all_gather_bytes(counts, dtype_size(t), rank()));
}
// A message to or from oneself crosses no wire.
void CountingCommunicator::count_p2p(DType t, size_t n, int peer, bool received) {
  count(CommKind::SendRecv, bytes(t, n), received && peer != rank() ? bytes(t, n) : 0);
}

void CountingCommunicator::all_reduce(TypedPtr buf, size_t n, ReduceOp op) {
  inner_->all_reduce(buf, n, op);
  count_all_reduce(buf.dtype, n);
}
RequestPtr CountingCommunicator::iall_reduce(TypedPtr buf, size_t n, ReduceOp op) {
  RequestPtr r = inner_->iall_reduce(buf, n, op);
  count_all_reduce(buf.dtype, n);
  return r;
}

void CountingCommunicator::reduce_scatter(ConstTypedPtr send, TypedPtr recv, const std::vector<size_t>& counts) {
  inner_->reduce_scatter(send, recv, counts);
  count_reduce_scatter(send.dtype, counts);
}
RequestPtr CountingCommunicator::ireduce_scatter(ConstTypedPtr send, TypedPtr recv, const std::vector<size_t>& counts) {
  RequestPtr r = inner_->ireduce_scatter(send, recv, counts);
  count_reduce_scatter(send.dtype, counts);
  return r;
}

void CountingCommunicator::all_gather(TypedPtr buf, const std::vector<size_t>& counts) {
  inner_->all_gather(buf, counts);
  count_all_gather(buf.dtype, counts);
}
RequestPtr CountingCommunicator::iall_gather(TypedPtr buf, const std::vector<size_t>& counts) {
  RequestPtr r = inner_->iall_gather(buf, counts);
  count_all_gather(buf.dtype, counts);
  return r;
}

void CountingCommunicator::broadcast(TypedPtr buf, size_t n, int root) {
  inner_->broadcast(buf, n, root);
  count(CommKind::Broadcast, bytes(buf.dtype, n), ring_broadcast_bytes(n, dtype_size(buf.dtype), size(), rank(), root));
}

void CountingCommunicator::send(ConstTypedPtr buf, size_t n, int peer, int tag) {
  inner_->send(buf, n, peer, tag);
  count_p2p(buf.dtype, n, peer, false);
}
void CountingCommunicator::recv(TypedPtr buf, size_t n, int peer, int tag) {
  inner_->recv(buf, n, peer, tag);
  count_p2p(buf.dtype, n, peer, true);
}
RequestPtr CountingCommunicator::isend(ConstTypedPtr buf, size_t n, int peer, int tag) {
  RequestPtr r = inner_->isend(buf, n, peer, tag);
  count_p2p(buf.dtype, n, peer, false);
  return r;
}
RequestPtr CountingCommunicator::irecv(TypedPtr buf, size_t n, int peer, int tag) {
  RequestPtr r = inner_->irecv(buf, n, peer, tag);
  count_p2p(buf.dtype, n, peer, true);
  return r;
}
RequestPtr CountingCommunicator::itransfers(const std::vector<Transfer>& batch) {
  RequestPtr r = inner_->itransfers(batch);
  for (const Transfer& t : batch)
    count_p2p(t.kind == Transfer::Send ? t.send.dtype : t.recv.dtype, t.n, t.peer, t.kind == Transfer::Recv);
  return r;
}

}  // namespace loom::parallel
