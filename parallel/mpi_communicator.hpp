#pragma once
// Communicator over an MPI communicator, for host buffers.
//
// Non-blocking collectives run on a worker thread that owns a duplicate of the communicator
// and executes them in the order they were issued (the same order on every rank). Open MPI's
// own MPI_I* collectives advance only inside MPI calls made by the caller, so during a backward
// pass nothing would move; the worker gives real overlap wherever a core is free. Needs
// MPI_THREAD_MULTIPLE (MpiWorld asks for it).
//
// Dtypes: fp32 as MPI_FLOAT, int32 as MPI_INT32_T; bf16 and fp16 move as 2-byte elements and
// are reduced as set_half_reduce says (user-defined MPI ops, or through an fp32 scratch).
#include <mpi.h>

#include <condition_variable>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>

#include "parallel/communicator.hpp"
#include "parallel/mpi_half_reduce.hpp"

namespace loom::parallel {

class MpiCommunicator final : public Communicator {
 public:
  // Duplicates `comm` (twice: one for blocking calls, one for the worker). Collective. `name`
  // ("tp", "dp", ...) names the group in watchdog messages.
  explicit MpiCommunicator(MPI_Comm comm, std::string name = "world");
  ~MpiCommunicator() override;

  std::string backend() const override { return "mpi"; }
  int rank() const override { return rank_; }
  int size() const override { return size_; }
  MPI_Comm comm() const { return comm_; }
  const std::string& name() const { return name_; }

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
  void barrier() override;

  // How bf16/fp16 buffers are reduced (mpi_half_reduce.hpp); kDefaultHalfReduce unless set. Every
  // rank of the group must use the same. Applies to calls made after it (i* calls: posted after).
  void set_half_reduce(HalfReduce h) { half_reduce_ = h; }
  HalfReduce half_reduce() const { return half_reduce_; }

  // Scalars in double, reduced in rank order so every rank gets the bitwise-same sum.
  double sum_ordered(double local);

 private:
  RequestPtr post(std::function<void(MPI_Comm)> op);
  void do_all_reduce(MPI_Comm c, TypedPtr buf, size_t n, ReduceOp op, HalfReduce how) const;
  void do_reduce_scatter(MPI_Comm c, ConstTypedPtr send, TypedPtr recv, const std::vector<size_t>& counts,
                         HalfReduce how) const;
  void worker_loop();

  std::string name_;
  MPI_Comm comm_ = MPI_COMM_NULL, worker_comm_ = MPI_COMM_NULL;
  int channel_ = -1, worker_channel_ = -1;  // Watchdog channels of comm_ and worker_comm_
  int rank_ = 0, size_ = 1;
  HalfOps half_ops_;
  HalfReduce half_reduce_ = kDefaultHalfReduce;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::function<void()>> queue_;
  bool stop_ = false;
  std::thread worker_;
};

}  // namespace loom::parallel
