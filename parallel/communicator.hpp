#pragma once
// The collectives Loom needs, over one group of ranks, for buffers the implementation can reach
// (host memory for MPI, device memory for NCCL). Blocking calls return when the result is in
// place; the i* calls return a Request that must be waited on before the buffers are touched.
// Every rank of the group must issue the same collectives in the same order.
#include <cstddef>
#include <memory>
#include <string>
#include <vector>

namespace loom::parallel {

enum class ReduceOp { Sum, Max };

class Request {
 public:
  virtual ~Request() = default;
  virtual void wait() = 0;
};
using RequestPtr = std::unique_ptr<Request>;

class Communicator {
 public:
  virtual ~Communicator() = default;
  virtual std::string backend() const = 0;  // "mpi" | "nccl"
  virtual int rank() const = 0;
  virtual int size() const = 0;

  // In place: buf (n) becomes the reduction over the group.
  virtual void all_reduce(float* buf, size_t n, ReduceOp op) = 0;
  virtual RequestPtr iall_reduce(float* buf, size_t n, ReduceOp op) = 0;
  // send holds sum(counts) elements laid out rank by rank; recv (counts[rank()]) receives this
  // rank's part of the sum. Counts may differ between ranks and may be 0.
  virtual void reduce_scatter(const float* send, float* recv, const std::vector<size_t>& counts) = 0;
  virtual RequestPtr ireduce_scatter(const float* send, float* recv, const std::vector<size_t>& counts) = 0;
  // In place: rank r's part is already at its offset in buf (sum(counts)); afterwards every
  // rank holds every part.
  virtual void all_gather(float* buf, const std::vector<size_t>& counts) = 0;
  virtual RequestPtr iall_gather(float* buf, const std::vector<size_t>& counts) = 0;
  virtual void broadcast(float* buf, size_t n, int root) = 0;
  // Point to point within the group (peer is a group rank).
  virtual void send(const float* buf, size_t n, int peer, int tag) = 0;
  virtual void recv(float* buf, size_t n, int peer, int tag) = 0;
  virtual RequestPtr isend(const float* buf, size_t n, int peer, int tag) = 0;
  virtual RequestPtr irecv(float* buf, size_t n, int peer, int tag) = 0;
  virtual void barrier() = 0;
};

}  // namespace loom::parallel
