#pragma once
// A Communicator that forwards every call to another one and counts what each call moves
// (comm_volume.hpp: payload and ring-model wire bytes, per collective kind). ProcessGroups'
// device_*() accessors return these, so a step's communication volume is
// groups.device_volume() after the step minus before it.
//
// A call is counted as soon as the inner communicator has taken it: a blocking call when it
// returns, an i* call when it is posted (not when it completes). A call that throws (a dtype
// the inner one cannot take) counts nothing. The counters are atomics: calls are issued from one thread (the
// caller's; the MPI worker thread only executes them), and may be read from any.
#include <array>
#include <atomic>
#include <cstdint>
#include <string>
#include <vector>

#include "parallel/comm_volume.hpp"
#include "parallel/communicator.hpp"

namespace loom::parallel {

class CountingCommunicator final : public Communicator {
 public:
  // `inner` must outlive this, or be replaced by rebind() first.
  explicit CountingCommunicator(Communicator& inner) : inner_(&inner) {}

  // Forward to `inner` from now on, keeping the counts (ProcessGroups::use_nccl: the group's
  // volume, whichever communicator carries it). Not while a call is being issued.
  void rebind(Communicator& inner) { inner_ = &inner; }
  Communicator& inner() const { return *inner_; }
  // Everything counted since construction.
  CommVolume volume() const;

  std::string backend() const override { return inner_->backend(); }
  int rank() const override { return inner_->rank(); }
  int size() const override { return inner_->size(); }

  void all_reduce(TypedPtr buf, size_t n, ReduceOp op) override;
  RequestPtr iall_reduce(TypedPtr buf, size_t n, ReduceOp op) override;
  void reduce_scatter(ConstTypedPtr send, TypedPtr recv, const std::vector<size_t>& counts) override;
  RequestPtr ireduce_scatter(ConstTypedPtr send, TypedPtr recv, const std::vector<size_t>& counts) override;
  void all_gather(TypedPtr buf, const std::vector<size_t>& counts) override;
  RequestPtr iall_gather(TypedPtr buf, const std::vector<size_t>& counts) override;
  void broadcast(TypedPtr buf, size_t n, int root) override;
  void send(ConstTypedPtr buf, size_t n, int peer, int tag) override;
  void recv(TypedPtr buf, size_t n, int peer, int tag) override;
  RequestPtr isend(ConstTypedPtr buf, size_t n, int peer, int tag) override;
  RequestPtr irecv(TypedPtr buf, size_t n, int peer, int tag) override;
  RequestPtr itransfers(const std::vector<Transfer>& batch) override;
  void barrier() override { inner_->barrier(); }

 private:
  // One call of kind k: its payload and this rank's wire bytes.
  void count(CommKind k, uint64_t payload, uint64_t wire);
  void count_all_reduce(DType t, size_t n);
  void count_reduce_scatter(DType t, const std::vector<size_t>& counts);
  void count_all_gather(DType t, const std::vector<size_t>& counts);
  void count_p2p(DType t, size_t n, int peer, bool received);

  Communicator* inner_;
  std::array<std::atomic<uint64_t>, kCommKinds> payload_{}, wire_{}, calls_{};
};

}  // namespace loom::parallel
