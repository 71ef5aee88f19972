#pragma once
// The collectives Loom needs, over one group of ranks, for buffers the implementation can reach
// (host memory for MPI, device memory for NCCL). Blocking calls return when the result is in
// place; the i* calls return a Request that must be waited on before the buffers are touched.
// Every rank of the group must issue the same collectives in the same order.
//
// Buffers are typed (kernels/dtype.hpp): a float*, bf16*, fp16* or int32_t* converts to a
// TypedPtr, so fp32 callers pass float* as before. Counts are in elements of the buffer's
// dtype. Every rank must pass the same dtype for a call.
//   reductions (all_reduce, reduce_scatter): fp32, bf16, fp16;
//   data movement (all_gather, broadcast, send/recv): fp32, bf16, fp16, int32.
// An unsupported dtype, or send and recv of different dtypes, throws std::invalid_argument
// naming the call and both dtypes, before anything is communicated.
//
// Numerics of a Sum: the order in which the ranks' values are combined is the algorithm's
// (MPI's or NCCL's, chosen by message size and group size), not rank order, so a float sum is
// reproducible for one group size and message size but not across them, and bf16/fp16 results
// additionally depend on where the implementation rounds (after each combine, or once at the
// end when it sums in fp32: see MpiCommunicator::HalfReduce). Sums of small integers that stay
// exactly representable are exact in every dtype. Max is exact everywhere.
#include <cstddef>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "kernels/dtype.hpp"

namespace loom::parallel {

using loom::ConstTypedPtr;
using loom::DType;
using loom::TypedPtr;

enum class ReduceOp { Sum, Max };

class Request {
 public:
  virtual ~Request() = default;
  virtual void wait() = 0;
  // After wait(): the seconds the operation itself ran (from when it started moving data to its
  // completion, not counting time queued behind earlier operations), or < 0 where the
  // implementation does not know it. MpiCommunicator's i* collectives know it: they time the call
  // on the worker thread that runs it.
  virtual double run_seconds() const { return -1; }
};
using RequestPtr = std::unique_ptr<Request>;

// One point-to-point transfer of a batch (Communicator::itransfers): a send of `n` elements from
// `send` to group rank `peer`, or a receive into `recv` from it. `tag` matches a send with its
// receive where the implementation uses tags (MPI); NCCL matches them by issue order per peer.
struct Transfer {
  enum Kind { Send, Recv } kind = Send;
  ConstTypedPtr send{};
  TypedPtr recv{};
  size_t n = 0;
  int peer = 0, tag = 0;
  static Transfer to(ConstTypedPtr buf, size_t n, int peer, int tag) { return {Send, buf, {}, n, peer, tag}; }
  static Transfer from(TypedPtr buf, size_t n, int peer, int tag) { return {Recv, {}, buf, n, peer, tag}; }
};

class Communicator {
 public:
  virtual ~Communicator() = default;
  virtual std::string backend() const = 0;  // "mpi" | "nccl"
  virtual int rank() const = 0;
  virtual int size() const = 0;

  // In place: buf (n) becomes the reduction over the group.
  virtual void all_reduce(TypedPtr buf, size_t n, ReduceOp op) = 0;
  virtual RequestPtr iall_reduce(TypedPtr buf, size_t n, ReduceOp op) = 0;
  // send holds sum(counts) elements laid out rank by rank; recv (counts[rank()]) receives this
  // rank's part of the sum. Counts may differ between ranks and may be 0. send and recv have
  // one dtype.
  virtual void reduce_scatter(ConstTypedPtr send, TypedPtr recv, const std::vector<size_t>& counts) = 0;
  virtual RequestPtr ireduce_scatter(ConstTypedPtr send, TypedPtr recv, const std::vector<size_t>& counts) = 0;
  // In place: rank r's part is already at its offset in buf (sum(counts)); afterwards every
  // rank holds every part.
  virtual void all_gather(TypedPtr buf, const std::vector<size_t>& counts) = 0;
  virtual RequestPtr iall_gather(TypedPtr buf, const std::vector<size_t>& counts) = 0;
  virtual void broadcast(TypedPtr buf, size_t n, int root) = 0;
  // Point to point within the group (peer is a group rank); sender and receiver use one dtype.
  virtual void send(ConstTypedPtr buf, size_t n, int peer, int tag) = 0;
  virtual void recv(TypedPtr buf, size_t n, int peer, int tag) = 0;
  virtual RequestPtr isend(ConstTypedPtr buf, size_t n, int peer, int tag) = 0;
  virtual RequestPtr irecv(TypedPtr buf, size_t n, int peer, int tag) = 0;
  // Sends and receives posted as one batch, one request for all (a pipeline step's transfers to
  // both neighbours). They may progress in any order, so two ranks that each send to the other
  // before receiving cannot deadlock: NCCL's send and receive block until the peer's matching
  // call is issued, so NCCL groups the batch (ncclGroupStart/End); MPI's non-blocking calls
  // need nothing more (this default: isend/irecv each, waited together).
  virtual RequestPtr itransfers(const std::vector<Transfer>& batch) {
    auto all = std::make_unique<Requests>();
    for (const Transfer& t : batch)
      all->parts.push_back(t.kind == Transfer::Send ? isend(t.send, t.n, t.peer, t.tag) : irecv(t.recv, t.n, t.peer, t.tag));
    return all;
  }
  virtual void barrier() = 0;

 protected:
  // Several requests waited as one.
  struct Requests final : Request {
    std::vector<RequestPtr> parts;
    void wait() override {
      for (auto& p : parts) p->wait();
    }
  };
};

// The dtype checks every implementation makes at the top of a call (`what` names the call);
// each throws std::invalid_argument.
// Reductions: fp32, bf16, fp16.
inline void check_reduce_dtype(DType t, const char* what) {
  if (t == DType::f32 || t == DType::bf16 || t == DType::f16) return;
  throw std::invalid_argument(std::string(what) + ": cannot reduce a buffer of dtype " + dtype_name(t) +
                              " (fp32, bf16 or fp16)");
}
// reduce_scatter: both buffers of one reducible dtype.
inline void check_same_dtype(DType send, DType recv, const char* what) {
  if (send != recv)
    throw std::invalid_argument(std::string(what) + ": send buffer is " + dtype_name(send) + " but recv buffer is " +
                                dtype_name(recv) + " (they must match)");
  check_reduce_dtype(send, what);
}

}  // namespace loom::parallel
