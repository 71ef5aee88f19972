#include "parallel/mpi_communicator.hpp"

#include "parallel/mpi_check.hpp"
#include "parallel/mpi_world.hpp"

#include "parallel/watchdog.hpp"

#include <chrono>
#include <climits>
#include <exception>
#include <stdexcept>
#include <string>

namespace loom::parallel {
namespace {

void check(int rc, const char* what) { mpi_check(rc, what); }
int as_int(size_t n) { return mpi_count(n, "elements"); }

MPI_Op mpi_op(ReduceOp op) { return op == ReduceOp::Sum ? MPI_SUM : MPI_MAX; }

// A request completed by the worker thread.
struct WorkerRequest final : Request {
  std::mutex mu;
  std::condition_variable cv;
  bool done = false;
  std::exception_ptr error;
  double ran_s = -1;  // set by the worker before `done`
  void wait() override {
    std::unique_lock<std::mutex> lk(mu);
    cv.wait(lk, [&] { return done; });
    if (error) std::rethrow_exception(error);
  }
  double run_seconds() const override { return ran_s; }
};

struct MpiRequest final : Request {
  MPI_Request req = MPI_REQUEST_NULL;
  const char* op = "";
  const char* group = "";
  int channel = -1;
  void wait() override {
    Watchdog::Scope w(op, group, channel, /*collective=*/false);
    check(MPI_Wait(&req, MPI_STATUS_IGNORE), "MPI_Wait");
  }
};

void displacements(const std::vector<size_t>& counts, std::vector<int>& cnt, std::vector<int>& disp) {
  size_t off = 0;
  cnt.clear();
  disp.clear();
  for (size_t c : counts) {
    cnt.push_back(as_int(c));
    disp.push_back(as_int(off));
    off += c;
  }
}

size_t sum(const std::vector<size_t>& counts) {
  size_t total = 0;
  for (size_t x : counts) total += x;
  return total;
}

void do_all_gather(MPI_Comm c, TypedPtr buf, const std::vector<size_t>& counts) {
  if (sum(counts) == 0) return;
  std::vector<int> cnt, disp;
  displacements(counts, cnt, disp);
  const MPI_Datatype t = mpi_datatype(buf.dtype);
  check(MPI_Allgatherv(MPI_IN_PLACE, 0, t, buf.data, cnt.data(), disp.data(), t, c), "MPI_Allgatherv");
}

}  // namespace

const char* all_reduce_algo_name(AllReduceAlgo a) {
  switch (a) {
    case AllReduceAlgo::Auto: return "auto";
    case AllReduceAlgo::Mpi: return "mpi";
    case AllReduceAlgo::Ring: return "ring";
    case AllReduceAlgo::Hierarchical: return "hierarchical";
  }
  return "?";
}

AllReduceAlgo parse_all_reduce_algo(const std::string& s) {
  for (AllReduceAlgo a : {AllReduceAlgo::Auto, AllReduceAlgo::Mpi, AllReduceAlgo::Ring, AllReduceAlgo::Hierarchical})
    if (s == all_reduce_algo_name(a)) return a;
  throw std::invalid_argument("all-reduce algorithm '" + s + "': expected auto, mpi, ring or hierarchical");
}

AllReduceAlgo auto_all_reduce_algo(size_t bytes, int group_size) {
  return group_size > 1 && bytes >= kRingMinBytes ? AllReduceAlgo::Ring : AllReduceAlgo::Mpi;
}

AllReduceAlgo MpiCommunicator::resolved_all_reduce_algo(size_t n, DType t) const {
  return algo_ == AllReduceAlgo::Auto ? auto_all_reduce_algo(n * dtype_size(t), size_) : algo_;
}

MpiCommunicator::AllReduceHow MpiCommunicator::how_now(size_t n, DType t) const {
  return {half_reduce_, resolved_all_reduce_algo(n, t), ranks_per_node_, ring_};
}

void MpiCommunicator::do_all_reduce(Lane& lane, TypedPtr buf, size_t n, ReduceOp op, const AllReduceHow& how) const {
  if (n == 0) return;
  if (how.algo == AllReduceAlgo::Ring) {
    ring_all_reduce(lane.ring, buf, n, op, how.half, how.ring);
    return;
  }
  if (how.algo == AllReduceAlgo::Hierarchical) {
    // Collective: every rank of the group reaches this call with the same ranks_per_node.
    if (!lane.split || lane.split->ranks_per_node() != how.ranks_per_node) {
      lane.split.reset();
      lane.split = std::make_unique<NodeSplit>(lane.ring, how.ranks_per_node);
    }
    hierarchical_all_reduce(*lane.split, buf, n, op, how.half, half_ops_, how.ring);
    return;
  }
  MPI_Comm c = lane.comm;
  if (buf.dtype == DType::f32)
    check(MPI_Allreduce(MPI_IN_PLACE, buf.data, as_int(n), MPI_FLOAT, mpi_op(op), c), "MPI_Allreduce");
  else if (how.half == HalfReduce::UserOp)
    check(MPI_Allreduce(MPI_IN_PLACE, buf.data, as_int(n), MPI_UINT16_T, half_ops_.get(buf.dtype, op), c),
          "MPI_Allreduce");
  else
    all_reduce_through_fp32(c, buf, n, op);
}

void MpiCommunicator::do_reduce_scatter(Lane& lane, ConstTypedPtr send, TypedPtr recv,
                                        const std::vector<size_t>& counts, const AllReduceHow& how_) const {
  if (sum(counts) == 0) return;
  if (how_.algo != AllReduceAlgo::Mpi) {
    ring_reduce_scatter(lane.ring, send, recv, counts, how_.half, how_.ring);
    return;
  }
  MPI_Comm c = lane.comm;
  const HalfReduce how = how_.half;
  std::vector<int> cnt, disp;
  displacements(counts, cnt, disp);
  if (send.dtype == DType::f32)
    check(MPI_Reduce_scatter(send.data, recv.data, cnt.data(), MPI_FLOAT, MPI_SUM, c), "MPI_Reduce_scatter");
  else if (how == HalfReduce::UserOp)
    check(MPI_Reduce_scatter(send.data, recv.data, cnt.data(), MPI_UINT16_T, half_ops_.get(send.dtype, ReduceOp::Sum),
                             c),
          "MPI_Reduce_scatter");
  else
    reduce_scatter_through_fp32(c, send, recv, counts, rank_);
}

MpiCommunicator::MpiCommunicator(MPI_Comm comm, std::string name) : name_(std::move(name)) {
  check(MPI_Comm_dup(comm, &comm_), "MPI_Comm_dup");
  check(MPI_Comm_dup(comm, &worker_comm_), "MPI_Comm_dup");
  MPI_Comm_set_errhandler(comm_, MPI_ERRORS_RETURN);
  MPI_Comm_set_errhandler(worker_comm_, MPI_ERRORS_RETURN);
  lane_.comm = comm_;
  worker_lane_.comm = worker_comm_;
  for (Lane* l : {&lane_, &worker_lane_}) {
    check(MPI_Comm_dup(comm, &l->ring), "MPI_Comm_dup");
    MPI_Comm_set_errhandler(l->ring, MPI_ERRORS_RETURN);
  }
  MPI_Comm_rank(comm_, &rank_);
  MPI_Comm_size(comm_, &size_);
  {
    // The ring's segments suit the transport (ring_allreduce.cpp); the results do not depend on it.
    MPI_Comm node;
    check(MPI_Comm_split_type(comm_, MPI_COMM_TYPE_SHARED, rank_, MPI_INFO_NULL, &node), "MPI_Comm_split_type");
    int node_size = 0;
    MPI_Comm_size(node, &node_size);
    MPI_Comm_free(&node);
    ring_ = default_ring_options(node_size == size_);
  }
  // The members' world ranks, so that a timed-out call can name the members that never came.
  const std::vector<int> world = world_ranks(comm_);
  channel_ = Watchdog::register_channel(name_.c_str(), world);
  worker_channel_ = Watchdog::register_channel(name_.c_str(), world);
  worker_ = std::thread([this] { worker_loop(); });
}

MpiCommunicator::~MpiCommunicator() {
  {
    std::lock_guard<std::mutex> lk(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  worker_.join();
  Watchdog::release_channel(channel_);
  Watchdog::release_channel(worker_channel_);
  int finalized = 0;
  MPI_Finalized(&finalized);
  lane_.split.reset();
  worker_lane_.split.reset();
  if (!finalized) {
    MPI_Comm_free(&lane_.ring);
    MPI_Comm_free(&worker_lane_.ring);
    MPI_Comm_free(&comm_);
    MPI_Comm_free(&worker_comm_);
  }
}

void MpiCommunicator::worker_loop() {
  for (;;) {
    std::function<void()> job;
    {
      std::unique_lock<std::mutex> lk(mu_);
      cv_.wait(lk, [&] { return stop_ || !queue_.empty(); });
      if (queue_.empty()) return;  // stop_ and drained
      job = std::move(queue_.front());
      queue_.pop_front();
    }
    job();
  }
}

RequestPtr MpiCommunicator::post(std::function<void(MPI_Comm)> op) {
  auto req = std::make_unique<WorkerRequest>();
  WorkerRequest* r = req.get();
  {
    std::lock_guard<std::mutex> lk(mu_);
    queue_.push_back([this, r, op = std::move(op)] {
      std::exception_ptr err;
      const auto t0 = std::chrono::steady_clock::now();  // two clock reads: nothing the call notices
      try {
        op(worker_comm_);
      } catch (...) {
        err = std::current_exception();
      }
      const double ran = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      std::lock_guard<std::mutex> lk2(r->mu);
      r->ran_s = ran;
      r->error = err;
      r->done = true;
      r->cv.notify_all();
    });
  }
  cv_.notify_all();
  return req;
}

// Every blocking call runs inside a Watchdog::Scope (parallel.timeout_s), the worker's
// collectives too (the worker is the thread blocked in MPI while the caller waits on it). Dtypes
// are checked on the caller's thread, before anything is posted.
void MpiCommunicator::all_reduce(TypedPtr buf, size_t n, ReduceOp op) {
  check_reduce_dtype(buf.dtype, "all_reduce");
  Watchdog::Scope w("all_reduce", name_.c_str(), channel_);
  do_all_reduce(lane_, buf, n, op, how_now(n, buf.dtype));
}
RequestPtr MpiCommunicator::iall_reduce(TypedPtr buf, size_t n, ReduceOp op) {
  check_reduce_dtype(buf.dtype, "iall_reduce");
  return post([=, this, how = how_now(n, buf.dtype)](MPI_Comm) {
    Watchdog::Scope w("all_reduce (overlapped)", name_.c_str(), worker_channel_);
    do_all_reduce(worker_lane_, buf, n, op, how);
  });
}
void MpiCommunicator::reduce_scatter(ConstTypedPtr send, TypedPtr recv, const std::vector<size_t>& counts) {
  check_same_dtype(send.dtype, recv.dtype, "reduce_scatter");
  Watchdog::Scope w("reduce_scatter", name_.c_str(), channel_);
  do_reduce_scatter(lane_, send, recv, counts, how_now(sum(counts), send.dtype));
}
RequestPtr MpiCommunicator::ireduce_scatter(ConstTypedPtr send, TypedPtr recv, const std::vector<size_t>& counts) {
  check_same_dtype(send.dtype, recv.dtype, "ireduce_scatter");
  return post([=, this, how = how_now(sum(counts), send.dtype)](MPI_Comm) {
    Watchdog::Scope w("reduce_scatter (overlapped)", name_.c_str(), worker_channel_);
    do_reduce_scatter(worker_lane_, send, recv, counts, how);
  });
}
void MpiCommunicator::all_gather(TypedPtr buf, const std::vector<size_t>& counts) {
  Watchdog::Scope w("all_gather", name_.c_str(), channel_);
  do_all_gather(comm_, buf, counts);
}
RequestPtr MpiCommunicator::iall_gather(TypedPtr buf, const std::vector<size_t>& counts) {
  return post([=, this](MPI_Comm c) {
    Watchdog::Scope w("all_gather (overlapped)", name_.c_str(), worker_channel_);
    do_all_gather(c, buf, counts);
  });
}
void MpiCommunicator::broadcast(TypedPtr buf, size_t n, int root) {
  Watchdog::Scope w("broadcast", name_.c_str(), channel_);
  if (n) check(MPI_Bcast(buf.data, as_int(n), mpi_datatype(buf.dtype), root, comm_), "MPI_Bcast");
}
void MpiCommunicator::send(ConstTypedPtr buf, size_t n, int peer, int tag) {
  Watchdog::Scope w("send", name_.c_str(), channel_, /*collective=*/false);
  check(MPI_Send(buf.data, as_int(n), mpi_datatype(buf.dtype), peer, tag, comm_), "MPI_Send");
}
void MpiCommunicator::recv(TypedPtr buf, size_t n, int peer, int tag) {
  Watchdog::Scope w("recv", name_.c_str(), channel_, /*collective=*/false);
  check(MPI_Recv(buf.data, as_int(n), mpi_datatype(buf.dtype), peer, tag, comm_, MPI_STATUS_IGNORE), "MPI_Recv");
}
RequestPtr MpiCommunicator::isend(ConstTypedPtr buf, size_t n, int peer, int tag) {
  auto r = std::make_unique<MpiRequest>();
  r->op = "send (waiting for it)";
  r->group = name_.c_str();
  r->channel = channel_;
  check(MPI_Isend(buf.data, as_int(n), mpi_datatype(buf.dtype), peer, tag, comm_, &r->req), "MPI_Isend");
  return r;
}
RequestPtr MpiCommunicator::irecv(TypedPtr buf, size_t n, int peer, int tag) {
  auto r = std::make_unique<MpiRequest>();
  r->op = "recv (waiting for it)";
  r->group = name_.c_str();
  r->channel = channel_;
  check(MPI_Irecv(buf.data, as_int(n), mpi_datatype(buf.dtype), peer, tag, comm_, &r->req), "MPI_Irecv");
  return r;
}
void MpiCommunicator::barrier() {
  Watchdog::Scope w("barrier", name_.c_str(), channel_);
  check(MPI_Barrier(comm_), "MPI_Barrier");
}

double MpiCommunicator::sum_ordered(double local) {
  Watchdog::Scope w("all_gather (ordered sum)", name_.c_str(), channel_);
  std::vector<double> all(size_t(size_), 0.0);
  check(MPI_Allgather(&local, 1, MPI_DOUBLE, all.data(), 1, MPI_DOUBLE, comm_), "MPI_Allgather");
  double s = 0;
  for (double v : all) s += v;
  return s;
}

}  // namespace loom::parallel
