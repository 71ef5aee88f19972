// The CUDA backend class: memory, the stream and the scratch the ops borrow (cuda::Context); each
// op of kernels/backend_ops.def forwards to its launcher in kernels/cuda/<op>.cu.
#include "kernels/cuda/cuda_backend.hpp"

#include <algorithm>
#include <cstdio>

#include "kernels/cuda/cuda_check.cuh"
#include "kernels/cuda/ops.cuh"
#include "kernels/typed_dispatch.hpp"

namespace loom {
namespace cuda {

Workspace Context::workspace(size_t bytes) {
  if (bytes > ws_.bytes) grow_workspace(bytes);
  return ws_;
}

void Context::grow_workspace(size_t bytes) {
  if (ws_.ptr) {
    LOOM_CUDA_CHECK(cudaStreamSynchronize(stream));
    cudaFree(ws_.ptr);
    ws_ = {};  // not left pointing at freed memory if the allocation below fails
  }
  void* p = nullptr;
  LOOM_CUDA_CHECK(cudaMalloc(&p, bytes));
  ws_ = {p, bytes};
}

int32_t* Context::int_buffer(int which, size_t n) {
  if (n > int_capacity_[which]) {
    LOOM_CUDA_CHECK(cudaStreamSynchronize(stream));
    if (int_buffers_[which]) cudaFree(int_buffers_[which]);
    int_buffers_[which] = nullptr;
    int_capacity_[which] = 0;
    LOOM_CUDA_CHECK(cudaMalloc(&int_buffers_[which], n * sizeof(int32_t)));
    int_capacity_[which] = n;
  }
  return static_cast<int32_t*>(int_buffers_[which]);
}

void Context::free_scratch() {
  if (ws_.ptr) cudaFree(ws_.ptr);
  ws_ = {};
  for (int i = 0; i < kIntBuffers; ++i) {
    if (int_buffers_[i]) cudaFree(int_buffers_[i]);
    int_buffers_[i] = nullptr;
    int_capacity_[i] = 0;
  }
}

}  // namespace cuda

namespace {

class CudaBackend final : public Backend {
 public:
  explicit CudaBackend(int device) : device_(device) {
    LOOM_CUDA_CHECK(cudaSetDevice(device));
    LOOM_CUDA_CHECK(cudaStreamCreateWithFlags(&ctx_.stream, cudaStreamNonBlocking));
    LOOM_CUDA_CHECK(cublasLtCreate(&ctx_.lt));
    cudaDeviceProp prop{};
    LOOM_CUDA_CHECK(cudaGetDeviceProperties(&prop, device));
    sms_ = prop.multiProcessorCount;
    // FP32 lanes per SM: 64 on sm_70 and sm_80 (V100, A100), 128 on sm_86 and later (H100).
    fp32_lanes_ = (prop.major < 8 || (prop.major == 8 && prop.minor == 0)) ? 64 : 128;
    // Scratch for cuBLASLt (32 MiB, what Hopper kernels like) and the ops' partial sums; grown
    // on demand by Context::workspace().
    ctx_.workspace(size_t(32) << 20);
  }
  ~CudaBackend() override {
    cudaStreamSynchronize(ctx_.stream);
    ctx_.free_scratch();
    cublasLtDestroy(ctx_.lt);
    cudaStreamDestroy(ctx_.stream);
  }

  std::string name() const override { return "cuda"; }
  std::string device_pci_bus_id() const override {
    char id[32] = {};
    if (cudaDeviceGetPCIBusId(id, int(sizeof id), device_) != cudaSuccess) return "";
    return id;
  }
  double peak_flops(DType) override {
    // fp32 (no tensor cores) dense peak: SMs x FP32 lanes x 2 FLOP (FMA) x clock. The MFU
    // denominator for this fp32 backend; bf16 tensor-core peaks come with the bf16 path.
    int clock_khz = 0;
    cudaDeviceGetAttribute(&clock_khz, cudaDevAttrClockRate, device_);
    return double(sms_) * fp32_lanes_ * 2.0 * clock_khz * 1e3;
  }

  void* alloc_bytes(size_t bytes) override {
    void* p = nullptr;
    LOOM_CUDA_CHECK(cudaMalloc(&p, std::max<size_t>(bytes, 4)));
    LOOM_CUDA_CHECK(cudaMemsetAsync(p, 0, std::max<size_t>(bytes, 4), ctx_.stream));
    return p;
  }
  void release(void* p) override {
    if (p) cudaFree(p);
  }
  void copy_from_host(void* dst, const void* src, size_t bytes) override {
    copy(dst, src, bytes, cudaMemcpyHostToDevice);
  }
  void copy_to_host(void* dst, const void* src, size_t bytes) override { copy(dst, src, bytes, cudaMemcpyDeviceToHost); }
  void synchronize() override { LOOM_CUDA_CHECK(cudaStreamSynchronize(ctx_.stream)); }
  void* stream() override { return ctx_.stream; }
  size_t attention_saved_bytes(int B, int T, int NH, DType) const override {
    return size_t(B) * NH * T * sizeof(float);  // the log-sum-exp, fp32 whatever the compute dtype
  }

  // Each typed pointer checked against the launcher's parameter (kernels/typed_dispatch.hpp).
  template <typename Fn, typename... A>
  static decltype(auto) call_unwrapped(Fn* fn, A&&... args) {
    return fn(typed::unwrap(std::forward<A>(args))...);
  }
  // Every op of kernels/backend_ops.def: the launcher of the same name (ops.cuh), with the context.
#define LOOM_OP(RET, NAME, PARAMS, ARGS) \
  RET NAME PARAMS override { return call_unwrapped(&cuda::NAME, LOOM_CUDA_UNPAREN ARGS, ctx_); }
#include "kernels/backend_op_types.inc"
#include "kernels/backend_ops.def"

 private:
  void copy(void* dst, const void* src, size_t bytes, cudaMemcpyKind kind) {
    if (!bytes) return;
    LOOM_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, kind, ctx_.stream));
    LOOM_CUDA_CHECK(cudaStreamSynchronize(ctx_.stream));  // host buffers may be reused on return
  }

  int device_ = 0, sms_ = 0, fp32_lanes_ = 128;
  cuda::Context ctx_;  // the stream, the cuBLASLt handle and the scratch the ops borrow
};

}  // namespace

std::unique_ptr<Backend> make_cuda_backend(int device) { return std::make_unique<CudaBackend>(device); }

}  // namespace loom

extern "C" loom::Backend* loom_cuda_create_backend(int device, char* error, int error_size) {
  try {
    return new loom::CudaBackend(device);
  } catch (const std::exception& e) {
    std::snprintf(error, size_t(error_size), "%s", e.what());
    return nullptr;
  }
}
