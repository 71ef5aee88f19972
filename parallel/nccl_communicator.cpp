#include "parallel/nccl_communicator.hpp"

#include "parallel/comm_bench.hpp"

#include <algorithm>
#include <stdexcept>
#include <string>

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

struct EventRequest final : Request {
  cudaEvent_t ev = nullptr;
  ~EventRequest() override {
    if (ev) cudaEventDestroy(ev);
  }
  void wait() override { cuda_check(cudaEventSynchronize(ev), "cudaEventSynchronize"); }
};

class NcclCommunicator final : public Communicator {
 public:
  NcclCommunicator(MPI_Comm comm, int device, void* compute_stream)
      : compute_(static_cast<cudaStream_t>(compute_stream)) {
    MPI_Comm_rank(comm, &rank_);
    MPI_Comm_size(comm, &size_);
    cuda_check(cudaSetDevice(device), "cudaSetDevice");
    ncclUniqueId id;
    if (rank_ == 0) nccl_check(ncclGetUniqueId(&id), "ncclGetUniqueId", rank_);
    MPI_Bcast(&id, sizeof id, MPI_BYTE, 0, comm);
    nccl_check(ncclCommInitRank(&comm_, size_, id, rank_), "ncclCommInitRank", rank_);
    cuda_check(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking), "cudaStreamCreate");
    cuda_check(cudaEventCreateWithFlags(&computed_, cudaEventDisableTiming), "cudaEventCreate");
  }
  ~NcclCommunicator() override {
    if (computed_) cudaEventDestroy(computed_);
    if (comm_) ncclCommDestroy(comm_);
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
    return record();
  }
  void reduce_scatter(ConstTypedPtr send, TypedPtr recv, const std::vector<size_t>& counts) override {
    ireduce_scatter(send, recv, counts)->wait();
  }
  RequestPtr ireduce_scatter(ConstTypedPtr send, TypedPtr recv, const std::vector<size_t>& counts) override {
    check_same_dtype(send.dtype, recv.dtype, "reduce_scatter");
    after_compute();
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
    return record();
  }
  void all_gather(TypedPtr buf, const std::vector<size_t>& counts) override { iall_gather(buf, counts)->wait(); }
  RequestPtr iall_gather(TypedPtr buf, const std::vector<size_t>& counts) override {
    after_compute();
    nccl_check(ncclGroupStart(), "ncclGroupStart", rank_);
    size_t off = 0;
    for (int r = 0; r < size_; ++r) {
      void* part = (buf + off).data;
      nccl_check(ncclBroadcast(part, part, counts[size_t(r)], nccl_type(buf.dtype), r, comm_, stream_),
                 "ncclBroadcast", rank_);
      off += counts[size_t(r)];
    }
    nccl_check(ncclGroupEnd(), "ncclGroupEnd", rank_);
    return record();
  }
  void broadcast(TypedPtr buf, size_t n, int root) override {
    after_compute();
    nccl_check(ncclBroadcast(buf.data, buf.data, n, nccl_type(buf.dtype), root, comm_, stream_), "ncclBroadcast",
               rank_);
    record()->wait();
  }
  void send(ConstTypedPtr buf, size_t n, int peer, int tag) override { isend(buf, n, peer, tag)->wait(); }
  void recv(TypedPtr buf, size_t n, int peer, int tag) override { irecv(buf, n, peer, tag)->wait(); }
  RequestPtr isend(ConstTypedPtr buf, size_t n, int peer, int /*tag: NCCL orders by issue*/) override {
    after_compute();
    nccl_check(ncclSend(buf.data, n, nccl_type(buf.dtype), peer, comm_, stream_), "ncclSend", rank_);
    return record();
  }
  RequestPtr irecv(TypedPtr buf, size_t n, int peer, int /*tag*/) override {
    after_compute();
    nccl_check(ncclRecv(buf.data, n, nccl_type(buf.dtype), peer, comm_, stream_), "ncclRecv", rank_);
    return record();
  }
  void barrier() override {
    float* dummy = nullptr;
    cuda_check(cudaMallocAsync(reinterpret_cast<void**>(&dummy), sizeof(float), stream_), "cudaMallocAsync");
    all_reduce(dummy, 1, ReduceOp::Sum);
    cudaFreeAsync(dummy, stream_);
  }

 private:
  // The communicator's stream waits for the compute stream's queued work.
  void after_compute() {
    if (!compute_) return;
    cuda_check(cudaEventRecord(computed_, compute_), "cudaEventRecord");
    cuda_check(cudaStreamWaitEvent(stream_, computed_, 0), "cudaStreamWaitEvent");
  }
  RequestPtr record() {
    auto r = std::make_unique<EventRequest>();
    cuda_check(cudaEventCreateWithFlags(&r->ev, cudaEventDisableTiming), "cudaEventCreate");
    cuda_check(cudaEventRecord(r->ev, stream_), "cudaEventRecord");
    return r;
  }
  int rank_ = 0, size_ = 1;
  ncclComm_t comm_ = nullptr;
  cudaStream_t stream_ = nullptr;
  cudaStream_t compute_ = nullptr;
  cudaEvent_t computed_ = nullptr;
};

}  // namespace

std::unique_ptr<Communicator> make_nccl_communicator(MPI_Comm comm, int device, void* compute_stream) {
  return std::make_unique<NcclCommunicator>(comm, device, compute_stream);
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

std::unique_ptr<Communicator> make_nccl_communicator(MPI_Comm, int, void*) {
  throw std::runtime_error("this loom was built without NCCL (CUDA toolkit or nccl.h not found at configure time)");
}
#endif

}  // namespace loom::parallel
