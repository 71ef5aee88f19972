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
//
// all_reduce and iall_reduce run one of several algorithms (AllReduceAlgo, set_all_reduce_algo):
// MPI_Allreduce, the pipelined ring (ring_allreduce.hpp) or the hierarchical one
// (hierarchical_allreduce.hpp). reduce_scatter and ireduce_scatter follow the same setting:
// MPI_Reduce_scatter where it resolves to Mpi, the ring's reduce-scatter (ring_reduce_scatter)
// for Ring and for Hierarchical (there is no hierarchical reduce-scatter; a ring of ranks ordered
// by node crosses each node boundary once). The other collectives are always MPI's.
#include <mpi.h>

#include <condition_variable>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>

#include "parallel/communicator.hpp"
#include "parallel/hierarchical_allreduce.hpp"
#include "parallel/mpi_half_reduce.hpp"
#include "parallel/ring_allreduce.hpp"

namespace loom::parallel {

// Which all-reduce a MpiCommunicator runs. Auto: MPI_Allreduce below kRingMinBytes, the ring at
// and above it, decided by the message's bytes and the group's size only, never by where the
// ranks are placed, so that one layout gives bitwise the same sums on one host and across nodes.
// Hierarchical is never chosen by Auto (it depends on the placement by construction).
enum class AllReduceAlgo { Auto, Mpi, Ring, Hierarchical };
// "auto" | "mpi" | "ring" | "hierarchical"; parse throws std::invalid_argument on anything else.
const char* all_reduce_algo_name(AllReduceAlgo a);
AllReduceAlgo parse_all_reduce_algo(const std::string& s);

// Auto's crossover: MPI_Allreduce below 4 MiB, the ring from 4 MiB, for every group of 2 or
// more ranks. From `loom bench comm` between network namespaces (tbf 1 and 10 Gbit, median of 3
// runs, docs/parallelism.md has the tables), busbw in GB/s, ring against MPI:
//   1 Gbit, 1 rank per node: the ring is at the link (0.119) from 256 KiB on 2 and 4 nodes; MPI
//     gets 0.06-0.07 from 1 MiB up. 2 ranks per node: MPI is ahead at 1 MiB on 2 nodes (0.128 vs
//     0.119), the ring from 4 MiB everywhere (0.119 vs 0.041-0.099).
//   10 Gbit (CPU-bound on this 2-core machine): 1 MiB is a draw or MPI by up to 8% (2 nodes) and
//     17-50% (2 ranks per node); from 4 MiB the ring leads on 1 rank per node (1.06-1.14 vs
//     0.82-1.05; at 64 MiB 0.76-1.16 vs 0.52-0.72), and on 4 nodes x 2; 2 nodes x 2 stays MPI's
//     up to 16 MiB (0.91 vs 1.19 at 4 MiB, 0.76 vs 0.81 at 16 MiB; 4 ranks on 2 cores).
// 4 MiB rather than 256 KiB-1 MiB: Auto is then never slower than MPI on any 1-rank-per-node
// measurement; the cost is the ring's 1.7x at 1 Gbit for 256 KiB-4 MiB messages (ask for
// parallel.allreduce: ring). Gradient buckets (parallel.bucket_mb 25) are above it.
constexpr size_t kRingMinBytes = size_t(4) << 20;
// What Auto runs for a message of `bytes` over `group_size` ranks: Mpi or Ring.
AllReduceAlgo auto_all_reduce_algo(size_t bytes, int group_size);

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

  // The all-reduce algorithm (Auto unless set). Like set_half_reduce: every rank of the group
  // must set the same, and it applies to calls made (i* calls: posted) after it.
  void set_all_reduce_algo(AllReduceAlgo a) { algo_ = a; }
  AllReduceAlgo all_reduce_algo() const { return algo_; }
  // What all_reduce of n elements of dtype t runs now: Mpi, Ring or Hierarchical (Auto resolved).
  AllReduceAlgo resolved_all_reduce_algo(size_t n, DType t) const;
  // Hierarchical's nodes: 0 (default) the real ones (MPI_COMM_TYPE_SHARED); k > 0 pretends that
  // group ranks [j k, (j+1) k) share node j, so tests on one host get several "nodes". Every rank
  // must set the same. The node and leader communicators are split collectively by the first
  // hierarchical all-reduce after a change (every rank reaches it: the call is collective).
  void set_ranks_per_node(int k) { ranks_per_node_ = k; }
  int ranks_per_node() const { return ranks_per_node_; }
  // The ring's segment size and segments in flight; same on every rank. Default:
  // default_ring_options(every rank of the group on one node), found in the constructor.
  void set_ring_options(RingOptions o) { ring_ = o; }
  const RingOptions& ring_options() const { return ring_; }

  // Scalars in double, reduced in rank order so every rank gets the bitwise-same sum.
  double sum_ordered(double local);

 private:
  RequestPtr post(std::function<void(MPI_Comm)> op);
  // How one all_reduce runs, captured when it is issued (i* calls run later on the worker).
  struct AllReduceHow {
    HalfReduce half;
    AllReduceAlgo algo;  // resolved: Mpi, Ring or Hierarchical
    int ranks_per_node;
    RingOptions ring;
  };
  // The communicators of one thread: comm_ for blocking calls, worker_comm_ for the worker's.
  struct Lane {
    MPI_Comm comm = MPI_COMM_NULL;  // MPI's collectives
    MPI_Comm ring = MPI_COMM_NULL;  // a duplicate carrying only the ring's messages
    std::unique_ptr<NodeSplit> split;  // hierarchical's, split from `ring` on first use
  };
  AllReduceHow how_now(size_t n, DType t) const;
  void do_all_reduce(Lane& lane, TypedPtr buf, size_t n, ReduceOp op, const AllReduceHow& how) const;
  void do_reduce_scatter(Lane& lane, ConstTypedPtr send, TypedPtr recv, const std::vector<size_t>& counts,
                         const AllReduceHow& how) const;
  void worker_loop();

  std::string name_;
  MPI_Comm comm_ = MPI_COMM_NULL, worker_comm_ = MPI_COMM_NULL;
  int channel_ = -1, worker_channel_ = -1;  // Watchdog channels of comm_ and worker_comm_
  int rank_ = 0, size_ = 1;
  HalfOps half_ops_;
  HalfReduce half_reduce_ = kDefaultHalfReduce;
  AllReduceAlgo algo_ = AllReduceAlgo::Auto;
  int ranks_per_node_ = 0;
  RingOptions ring_ = default_ring_options();
  Lane lane_, worker_lane_;  // lane_.comm is comm_, worker_lane_.comm is worker_comm_
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::function<void()>> queue_;
  bool stop_ = false;
  std::thread worker_;
};

}  // namespace loom::parallel
