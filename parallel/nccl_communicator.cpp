#include "parallel/nccl_communicator.hpp"

#include "parallel/abort_hooks.hpp"
#include "parallel/comm_bench.hpp"
#include "parallel/mpi_world.hpp"
#include "parallel/watchdog.hpp"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <string>
#include <thread>

#ifdef LOOM_HAVE_NCCL
#include <cuda_runtime.h>
#include <nccl.h>
#endif

namespace loom::parallel {

#ifdef LOOM_HAVE_NCCL
namespace {

void nccl_check(ncclResult_t r, const char* what, int rank) {
  if (r != ncclSuccess)
    throw std::runtime_error(std::string(what) + " failed on group rank " + std::to_string(rank) + ": " +
                             ncclGetErrorString(r));
}
void cuda_check(cudaError_t e, const std::string& what) {
  if (e != cudaSuccess) throw std::runtime_error(std::string(what) + ": " + cudaGetErrorString(e));
}

// fp32 -> ncclFloat, bf16 -> ncclBfloat16, fp16 -> ncclHalf, int32 -> ncclInt32.
ncclDataType_t nccl_type(DType t) {
  switch (t) {
    case DType::f32: return ncclFloat;
    case DType::bf16: return ncclBfloat16;
    case DType::f16: return ncclHalf;
    case DType::i32: return ncclInt32;
  }
  throw std::logic_error("nccl_type: unknown dtype");
}
ncclRedOp_t nccl_op(ReduceOp op) { return op == ReduceOp::Sum ? ncclSum : ncclMax; }

// The communicator's handle and what its requests and its abort hook share, held by shared_ptr:
// the hook runs on the abort path's thread, possibly while the communicator is being destroyed.
// `mu` serialises every use of the handle (issuing operations, reading its asynchronous error,
// the abort, the destroy), and `state` says which of the last two freed it: only one does.
struct CommState {
  enum State { Live, Aborted, Destroyed };
  std::mutex mu;
  ncclComm_t comm = nullptr;
  State state = Live;               // guarded by mu
  std::atomic<bool> aborted{false};  // state == Aborted, readable without the lock
  std::string name;
  int channel = -1, rank = 0;
};

// After ncclCommAbort the communicator's kernels return early and every result is void; the
// abort that called it ends the process within its deadline (bounded_abort.hpp). Continuing
// would issue the next call on a freed handle.
[[noreturn]] void park_until_the_abort_ends_the_process() {
  for (;;) std::this_thread::sleep_for(std::chrono::seconds(1));
}

// The wait polls instead of cudaEventSynchronize: inside a Watchdog::Scope (a hung collective is
// reported and aborts the job after parallel.timeout_s; the time includes the compute queued
// ahead of the operation on the stream), and checking NCCL's asynchronous error, which is how a
// peer's death or a network failure surfaces (the kernel would otherwise spin).
struct EventRequest final : Request {
  cudaEvent_t ev = nullptr;
  std::shared_ptr<CommState> st;
  const char* op = "";
  bool collective = true;
  ~EventRequest() override {
    if (ev) cudaEventDestroy(ev);
  }
  void wait() override {
    Watchdog::Scope scope(op, st->name.c_str(), st->channel, collective);
    // Spin for the first 200 us (a tensor-parallel all-reduce on the critical path often ends
    // within it), then poll every 20 us and leave the core to the other threads.
    const auto t0 = std::chrono::steady_clock::now();
    for (;;) {
      const cudaError_t e = cudaEventQuery(ev);
      if (st->aborted.load()) park_until_the_abort_ends_the_process();
      if (e == cudaSuccess) return;
      if (e != cudaErrorNotReady) cuda_check(e, "cudaEventQuery");
      if (std::chrono::steady_clock::now() - t0 < std::chrono::microseconds(200)) continue;
      std::string failed;
      {
        std::lock_guard<std::mutex> lk(st->mu);
        ncclResult_t async = ncclSuccess;
        if (st->state == CommState::Live && ncclCommGetAsyncError(st->comm, &async) == ncclSuccess &&
            async != ncclSuccess && async != ncclInProgress)
          failed = std::string(ncclGetErrorString(async)) + " (" + ncclGetLastError(st->comm) + ")";
      }
      if (!failed.empty())
        throw std::runtime_error(std::string(op) + " on the " + st->name + " group failed on group rank " +
                                 std::to_string(st->rank) + ": " + failed);
      std::this_thread::sleep_for(std::chrono::microseconds(20));
    }
  }
};

class NcclCommunicator final : public Communicator {
 public:
  // nccl_prepare has run on every member (and made `root_id` on rank 0).
  NcclCommunicator(MPI_Comm comm, const NcclId& root_id, int device, void* compute_stream, const std::string& name)
      : st_(std::make_shared<CommState>()), compute_(static_cast<cudaStream_t>(compute_stream)) {
    MPI_Comm_rank(comm, &rank_);
    MPI_Comm_size(comm, &size_);
    st_->name = name;
    st_->rank = rank_;
    // The members' world ranks: the watchdog names the ones a timed-out call waits for.
    st_->channel = Watchdog::register_channel(st_->name.c_str(), world_ranks(comm));
    try {
      // The id's broadcast and ncclCommInitRank wait for every member: watched as one collective
      // (parallel.timeout_s), so a member that never arrives ends the job, named, instead of
      // leaving the others inside NCCL's initialisation for ever.
      Watchdog::Scope scope("NCCL initialisation (id broadcast, ncclCommInitRank)", st_->name.c_str(),
                            st_->channel);
      NcclId bytes = root_id;
      if (MPI_Bcast(bytes.data(), int(bytes.size()), MPI_BYTE, 0, comm) != MPI_SUCCESS)
        throw std::runtime_error("MPI_Bcast of the NCCL id failed on the " + name + " group");
      ncclUniqueId id;
      std::memcpy(&id, bytes.data(), sizeof id);
      cuda_check(cudaSetDevice(device), "cudaSetDevice");  // the thread's current device, as nccl_prepare left it
      nccl_check(ncclCommInitRank(&st_->comm, size_, id, rank_), "ncclCommInitRank", rank_);
      comm_ = st_->comm;
      cuda_check(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking), "cudaStreamCreate");
      cuda_check(cudaEventCreateWithFlags(&computed_, cudaEventDisableTiming), "cudaEventCreate");
    } catch (...) {
      Watchdog::release_channel(st_->channel);  // (the job ends: ProcessGroups::use_nccl aborts it)
      throw;
    }
    // The abort path's ncclCommAbort makes the communicator's kernels return, so the device is
    // released and the process can end. It waits for an operation being issued (the lock); the
    // abort's deadline bounds that wait if the issue itself hangs (connecting to a dead peer).
    abort_hook_ = add_abort_hook("ncclCommAbort(" + name + ")", [st = st_] {
      std::lock_guard<std::mutex> lk(st->mu);
      if (st->state != CommState::Live) return;
      st->state = CommState::Aborted;
      st->aborted = true;
      ncclCommAbort(st->comm);
    });
  }
  ~NcclCommunicator() override {
    remove_abort_hook(abort_hook_);
    {
      std::lock_guard<std::mutex> lk(st_->mu);
      if (st_->state == CommState::Live) {
        st_->state = CommState::Destroyed;
        ncclCommDestroy(st_->comm);
      }
    }
    Watchdog::release_channel(st_->channel);
    if (computed_) cudaEventDestroy(computed_);
    if (stream_) cudaStreamDestroy(stream_);
  }
  std::string backend() const override { return "nccl"; }
  int rank() const override { return rank_; }
  int size() const override { return size_; }

  // NCCL reduces bf16 and fp16 in its kernels (widening to float per combine, as its ring or
  // tree orders them); the dtype checks match MpiCommunicator's.
  void all_reduce(TypedPtr buf, size_t n, ReduceOp op) override { iall_reduce(buf, n, op)->wait(); }
  RequestPtr iall_reduce(TypedPtr buf, size_t n, ReduceOp op) override {
    check_reduce_dtype(buf.dtype, "all_reduce");
    Issue issue(*this, "all_reduce");
    nccl_check(ncclAllReduce(buf.data, buf.data, n, nccl_type(buf.dtype), nccl_op(op), comm_, stream_),
               "ncclAllReduce", rank_);
    return record("all_reduce");
  }
  void reduce_scatter(ConstTypedPtr send, TypedPtr recv, const std::vector<size_t>& counts) override {
    ireduce_scatter(send, recv, counts)->wait();
  }
  RequestPtr ireduce_scatter(ConstTypedPtr send, TypedPtr recv, const std::vector<size_t>& counts) override {
    check_same_dtype(send.dtype, recv.dtype, "reduce_scatter");
    Issue issue(*this, "reduce_scatter");
    if (equal_parts(counts)) {  // ZeRO's shards are equal except where a tensor's end cuts them
      nccl_check(ncclReduceScatter(send.data, recv.data, counts[0], nccl_type(send.dtype), ncclSum, comm_, stream_),
                 "ncclReduceScatter", rank_);
      return record("reduce_scatter");
    }
    // NCCL's reduce-scatter needs equal parts: uneven parts become one reduce per rank.
    nccl_check(ncclGroupStart(), "ncclGroupStart", rank_);
    size_t off = 0;
    for (int r = 0; r < size_; ++r) {
      nccl_check(ncclReduce((send + off).data, recv.data, counts[size_t(r)], nccl_type(send.dtype), ncclSum, r, comm_,
                            stream_),
                 "ncclReduce", rank_);
      off += counts[size_t(r)];
    }
    nccl_check(ncclGroupEnd(), "ncclGroupEnd", rank_);
    return record("reduce_scatter");
  }
  void all_gather(TypedPtr buf, const std::vector<size_t>& counts) override { iall_gather(buf, counts)->wait(); }
  RequestPtr iall_gather(TypedPtr buf, const std::vector<size_t>& counts) override {
    Issue issue(*this, "all_gather");
    if (equal_parts(counts)) {  // in place: this rank's part is already at its offset
      const void* mine = (buf + counts[0] * size_t(rank_)).data;
      nccl_check(ncclAllGather(mine, buf.data, counts[0], nccl_type(buf.dtype), comm_, stream_), "ncclAllGather",
                 rank_);
      return record("all_gather");
    }
    // Uneven parts: one broadcast per rank, grouped.
    nccl_check(ncclGroupStart(), "ncclGroupStart", rank_);
    size_t off = 0;
    for (int r = 0; r < size_; ++r) {
      void* part = (buf + off).data;
      nccl_check(ncclBroadcast(part, part, counts[size_t(r)], nccl_type(buf.dtype), r, comm_, stream_),
                 "ncclBroadcast", rank_);
      off += counts[size_t(r)];
    }
    nccl_check(ncclGroupEnd(), "ncclGroupEnd", rank_);
    return record("all_gather");
  }
  void broadcast(TypedPtr buf, size_t n, int root) override {
    RequestPtr done;
    {
      Issue issue(*this, "broadcast");
      nccl_check(ncclBroadcast(buf.data, buf.data, n, nccl_type(buf.dtype), root, comm_, stream_), "ncclBroadcast",
                 rank_);
      done = record("broadcast");
    }
    done->wait();  // outside the issue's lock: an abort must be able to take it
  }
  void send(ConstTypedPtr buf, size_t n, int peer, int tag) override { isend(buf, n, peer, tag)->wait(); }
  void recv(TypedPtr buf, size_t n, int peer, int tag) override { irecv(buf, n, peer, tag)->wait(); }
  RequestPtr isend(ConstTypedPtr buf, size_t n, int peer, int /*tag: NCCL orders by issue*/) override {
    Issue issue(*this, "send");
    nccl_check(ncclSend(buf.data, n, nccl_type(buf.dtype), peer, comm_, stream_), "ncclSend", rank_);
    return record("send", false);
  }
  RequestPtr irecv(TypedPtr buf, size_t n, int peer, int /*tag*/) override {
    Issue issue(*this, "recv");
    nccl_check(ncclRecv(buf.data, n, nccl_type(buf.dtype), peer, comm_, stream_), "ncclRecv", rank_);
    return record("recv", false);
  }
  // NCCL's send and receive each wait for the peer's matching call: issued one by one, two
  // stages that both send first would wait for each other for ever. One group issues them all.
  RequestPtr itransfers(const std::vector<Transfer>& batch) override {
    Issue issue(*this, "send/recv");
    nccl_check(ncclGroupStart(), "ncclGroupStart", rank_);
    for (const Transfer& t : batch) {
      if (t.kind == Transfer::Send)
        nccl_check(ncclSend(t.send.data, t.n, nccl_type(t.send.dtype), t.peer, comm_, stream_), "ncclSend", rank_);
      else
        nccl_check(ncclRecv(t.recv.data, t.n, nccl_type(t.recv.dtype), t.peer, comm_, stream_), "ncclRecv", rank_);
    }
    nccl_check(ncclGroupEnd(), "ncclGroupEnd", rank_);
    return record("send/recv", false);  // after the group: its operations are on the stream only from ncclGroupEnd
  }
  void barrier() override {
    float* dummy = nullptr;
    cuda_check(cudaMallocAsync(reinterpret_cast<void**>(&dummy), sizeof(float), stream_), "cudaMallocAsync");
    all_reduce(dummy, 1, ReduceOp::Sum);
    cudaFreeAsync(dummy, stream_);
  }

 private:
  bool equal_parts(const std::vector<size_t>& counts) const {
    return int(counts.size()) == size_ && counts[0] > 0 &&
           std::all_of(counts.begin(), counts.end(), [&](size_t c) { return c == counts[0]; });
  }
  // Issuing an operation: in an uncounted watchdog scope (NCCL may connect to the peers here,
  // which blocks on a dead one) and under the state's lock (an abort waits for the issue; after
  // an abort nothing more is issued), after the compute stream's queued work.
  class Issue {
   public:
    Issue(NcclCommunicator& c, const char* op) : scope_(op, c.st_->name.c_str()), lk_(c.st_->mu) {
      if (c.st_->state != CommState::Live) {
        lk_.unlock();
        park_until_the_abort_ends_the_process();
      }
      c.after_compute();
    }

   private:
    Watchdog::Scope scope_;
    std::unique_lock<std::mutex> lk_;
  };
  // The communicator's stream waits for the compute stream's queued work.
  void after_compute() {
    if (!compute_) return;
    cuda_check(cudaEventRecord(computed_, compute_), "cudaEventRecord");
    cuda_check(cudaStreamWaitEvent(stream_, computed_, 0), "cudaStreamWaitEvent");
  }
  RequestPtr record(const char* op, bool collective = true) {
    auto r = std::make_unique<EventRequest>();
    r->st = st_;
    r->op = op;
    r->collective = collective;
    cuda_check(cudaEventCreateWithFlags(&r->ev, cudaEventDisableTiming), "cudaEventCreate");
    cuda_check(cudaEventRecord(r->ev, stream_), "cudaEventRecord");
    return r;
  }
  int rank_ = 0, size_ = 1;
  std::shared_ptr<CommState> st_;
  int abort_hook_ = -1;
  ncclComm_t comm_ = nullptr;
  cudaStream_t stream_ = nullptr;
  cudaStream_t compute_ = nullptr;
  cudaEvent_t computed_ = nullptr;
};

}  // namespace

static_assert(sizeof(ncclUniqueId) == sizeof(NcclId), "NcclId must hold an ncclUniqueId's bytes");

NcclId nccl_prepare(int device, bool make_id) {
  cuda_check(cudaSetDevice(device), "cudaSetDevice(" + std::to_string(device) + ")");
  NcclId out{};
  if (make_id) {
    ncclUniqueId id;
    nccl_check(ncclGetUniqueId(&id), "ncclGetUniqueId", 0);
    std::memcpy(out.data(), &id, sizeof id);
  }
  return out;
}

std::unique_ptr<Communicator> make_nccl_communicator(MPI_Comm comm, const NcclId& id, int device,
                                                     void* compute_stream, const std::string& name) {
  return std::make_unique<NcclCommunicator>(comm, id, device, compute_stream, name);
}

std::unique_ptr<Communicator> make_nccl_communicator(MPI_Comm comm, int device, void* compute_stream,
                                                     const std::string& name) {
  int rank = 0;
  MPI_Comm_rank(comm, &rank);
  return make_nccl_communicator(comm, nccl_prepare(device, rank == 0), device, compute_stream, name);
}

BenchMemory device_bench_memory(int device) {
  cuda_check(cudaSetDevice(device), "cudaSetDevice");
  return {[](size_t bytes) {
            void* p = nullptr;
            cuda_check(cudaMalloc(&p, std::max<size_t>(bytes, 1)), "cudaMalloc");
            return p;
          },
          [](void* p) { cudaFree(p); },
          [](void* d, const void* h, size_t bytes) {
            cuda_check(cudaMemcpy(d, h, bytes, cudaMemcpyHostToDevice), "cudaMemcpy");
          },
          [](void* h, const void* s, size_t bytes) {
            cuda_check(cudaMemcpy(h, s, bytes, cudaMemcpyDeviceToHost), "cudaMemcpy");
          }};
}
#else
BenchMemory device_bench_memory(int) {
  throw std::runtime_error("this loom was built without CUDA/NCCL: no device buffers for the NCCL benchmark");
}

namespace {
[[noreturn]] void no_nccl() {
  throw std::runtime_error("this loom was built without NCCL (CUDA toolkit or nccl.h not found at configure time)");
}
}  // namespace

NcclId nccl_prepare(int, bool) { no_nccl(); }
std::unique_ptr<Communicator> make_nccl_communicator(MPI_Comm, const NcclId&, int, void*, const std::string&) {
  no_nccl();
}
std::unique_ptr<Communicator> make_nccl_communicator(MPI_Comm, int, void*, const std::string&) { no_nccl(); }
#endif

}  // namespace loom::parallel
