#include "parallel/nccl_communicator.hpp"

#include "parallel/abort_hooks.hpp"
#include "parallel/comm_bench.hpp"
#include "parallel/watchdog.hpp"

#include <algorithm>
#include <chrono>
#include <atomic>
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
void cuda_check(cudaError_t e, const char* what) {
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

// What the requests of one communicator share: its handle and names, for the wait.
struct CommInfo {
  ncclComm_t comm = nullptr;
  std::string name;
  int channel = -1, rank = 0;
  std::atomic<bool> aborted{false};
};

// The wait polls instead of cudaEventSynchronize: inside a Watchdog::Scope (a hung collective is
// reported and aborts the job after parallel.timeout_s), and checking NCCL's asynchronous error,
// which is how a peer's death or a network failure surfaces (the kernel would otherwise spin).
struct EventRequest final : Request {
  cudaEvent_t ev = nullptr;
  const CommInfo* info = nullptr;
  const char* op = "";
  bool collective = true;
  ~EventRequest() override {
    if (ev) cudaEventDestroy(ev);
  }
  void wait() override {
    Watchdog::Scope scope(op, info->name.c_str(), info->channel, collective);
    // Spin for the first 200 us (a tensor-parallel all-reduce on the critical path often ends
    // within it), then poll every 20 us and leave the core to the other threads.
    const auto t0 = std::chrono::steady_clock::now();
    for (;;) {
      const cudaError_t e = cudaEventQuery(ev);
      if (e == cudaSuccess) return;
      if (e != cudaErrorNotReady) cuda_check(e, "cudaEventQuery");
      if (std::chrono::steady_clock::now() - t0 < std::chrono::microseconds(200)) continue;
      ncclResult_t async = ncclSuccess;
      if (!info->aborted.load() && ncclCommGetAsyncError(info->comm, &async) == ncclSuccess && async != ncclSuccess &&
          async != ncclInProgress)
        throw std::runtime_error(std::string(op) + " on the " + info->name + " group failed on group rank " +
                                 std::to_string(info->rank) + ": " + ncclGetErrorString(async) + " (" +
                                 ncclGetLastError(info->comm) + ")");
      std::this_thread::sleep_for(std::chrono::microseconds(20));
    }
  }
};

class NcclCommunicator final : public Communicator {
 public:
  NcclCommunicator(MPI_Comm comm, int device, void* compute_stream, const std::string& name)
      : compute_(static_cast<cudaStream_t>(compute_stream)) {
    MPI_Comm_rank(comm, &rank_);
    MPI_Comm_size(comm, &size_);
    info_.name = name;
    info_.rank = rank_;
    cuda_check(cudaSetDevice(device), "cudaSetDevice");
    ncclUniqueId id;
    if (rank_ == 0) nccl_check(ncclGetUniqueId(&id), "ncclGetUniqueId", rank_);
    MPI_Bcast(&id, sizeof id, MPI_BYTE, 0, comm);
    nccl_check(ncclCommInitRank(&comm_, size_, id, rank_), "ncclCommInitRank", rank_);
    info_.comm = comm_;
    cuda_check(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking), "cudaStreamCreate");
    cuda_check(cudaEventCreateWithFlags(&computed_, cudaEventDisableTiming), "cudaEventCreate");
    // The members' world ranks: the watchdog names the ones a timed-out call waits for.
    std::vector<int> local(size_t(size_), 0), world(size_t(size_), -1);
    for (int i = 0; i < size_; ++i) local[size_t(i)] = i;
    MPI_Group group = MPI_GROUP_NULL, world_group = MPI_GROUP_NULL;
    MPI_Comm_group(comm, &group);
    MPI_Comm_group(MPI_COMM_WORLD, &world_group);
    MPI_Group_translate_ranks(group, size_, local.data(), world_group, world.data());
    MPI_Group_free(&group);
    MPI_Group_free(&world_group);
    info_.channel = Watchdog::register_channel(info_.name.c_str(), world);
    // ncclCommAbort may be called from another thread while this one waits on the stream: it
    // makes the communicator's kernels return, so the wait (and the process) can end.
    abort_hook_ = add_abort_hook("ncclCommAbort(" + name + ")", [info = &info_] {
      if (!info->aborted.exchange(true)) ncclCommAbort(info->comm);
    });
  }
  ~NcclCommunicator() override {
    remove_abort_hook(abort_hook_);
    Watchdog::release_channel(info_.channel);
    if (computed_) cudaEventDestroy(computed_);
    if (comm_ && !info_.aborted.load()) ncclCommDestroy(comm_);
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
    after_compute();
    nccl_check(ncclAllReduce(buf.data, buf.data, n, nccl_type(buf.dtype), nccl_op(op), comm_, stream_),
               "ncclAllReduce", rank_);
    return record("all_reduce");
  }
  void reduce_scatter(ConstTypedPtr send, TypedPtr recv, const std::vector<size_t>& counts) override {
    ireduce_scatter(send, recv, counts)->wait();
  }
  RequestPtr ireduce_scatter(ConstTypedPtr send, TypedPtr recv, const std::vector<size_t>& counts) override {
    check_same_dtype(send.dtype, recv.dtype, "reduce_scatter");
    after_compute();
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
    after_compute();
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
    after_compute();
    nccl_check(ncclBroadcast(buf.data, buf.data, n, nccl_type(buf.dtype), root, comm_, stream_), "ncclBroadcast",
               rank_);
    record("broadcast")->wait();
  }
  void send(ConstTypedPtr buf, size_t n, int peer, int tag) override { isend(buf, n, peer, tag)->wait(); }
  void recv(TypedPtr buf, size_t n, int peer, int tag) override { irecv(buf, n, peer, tag)->wait(); }
  RequestPtr isend(ConstTypedPtr buf, size_t n, int peer, int /*tag: NCCL orders by issue*/) override {
    after_compute();
    nccl_check(ncclSend(buf.data, n, nccl_type(buf.dtype), peer, comm_, stream_), "ncclSend", rank_);
    return record("send", false);
  }
  RequestPtr irecv(TypedPtr buf, size_t n, int peer, int /*tag*/) override {
    after_compute();
    nccl_check(ncclRecv(buf.data, n, nccl_type(buf.dtype), peer, comm_, stream_), "ncclRecv", rank_);
    return record("recv", false);
  }
  // NCCL's send and receive each wait for the peer's matching call: issued one by one, two
  // stages that both send first would wait for each other for ever. One group issues them all.
  RequestPtr itransfers(const std::vector<Transfer>& batch) override {
    after_compute();
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
  // The communicator's stream waits for the compute stream's queued work.
  void after_compute() {
    if (!compute_) return;
    cuda_check(cudaEventRecord(computed_, compute_), "cudaEventRecord");
    cuda_check(cudaStreamWaitEvent(stream_, computed_, 0), "cudaStreamWaitEvent");
  }
  RequestPtr record(const char* op, bool collective = true) {
    auto r = std::make_unique<EventRequest>();
    r->info = &info_;
    r->op = op;
    r->collective = collective;
    cuda_check(cudaEventCreateWithFlags(&r->ev, cudaEventDisableTiming), "cudaEventCreate");
    cuda_check(cudaEventRecord(r->ev, stream_), "cudaEventRecord");
    return r;
  }
  int rank_ = 0, size_ = 1;
  CommInfo info_;
  int abort_hook_ = -1;
  ncclComm_t comm_ = nullptr;
  cudaStream_t stream_ = nullptr;
  cudaStream_t compute_ = nullptr;
  cudaEvent_t computed_ = nullptr;
};

}  // namespace

std::unique_ptr<Communicator> make_nccl_communicator(MPI_Comm comm, int device, void* compute_stream,
                                                     const std::string& name) {
  return std::make_unique<NcclCommunicator>(comm, device, compute_stream, name);
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

std::unique_ptr<Communicator> make_nccl_communicator(MPI_Comm, int, void*, const std::string&) {
  throw std::runtime_error("this loom was built without NCCL (CUDA toolkit or nccl.h not found at configure time)");
}
#endif

}  // namespace loom::parallel
