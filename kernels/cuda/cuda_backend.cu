// The CUDA backend class: memory, the stream and the scratch the ops borrow (cuda::Context); each
// op of kernels/backend_ops.def forwards to its launcher in kernels/cuda/<op>.cu.
#include "kernels/cuda/cuda_backend.hpp"

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <string>

#include "kernels/cuda/cuda_check.cuh"
#include "kernels/cuda/ops.cuh"

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
  ws_ = {LOOM_CUDA_MALLOC(bytes), bytes};
}

int32_t* Context::int_buffer(int which, size_t n) {
  if (n > int_capacity_[which]) {
    LOOM_CUDA_CHECK(cudaStreamSynchronize(stream));
    if (int_buffers_[which]) cudaFree(int_buffers_[which]);
    int_buffers_[which] = nullptr;
    int_capacity_[which] = 0;
    int_buffers_[which] = LOOM_CUDA_MALLOC(n * sizeof(int32_t));
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
    LOOM_CUDA_CHECK(cudaStreamCreateWithFlags(&copy_stream_, cudaStreamNonBlocking));
    LOOM_CUDA_CHECK(cudaEventCreateWithFlags(&compute_mark_, cudaEventDisableTiming));
    LOOM_CUDA_CHECK(cudaEventCreateWithFlags(&copy_mark_, cudaEventDisableTiming));
    LOOM_CUDA_CHECK(cublasLtCreate(&ctx_.lt));
    cudaDeviceProp prop{};
    LOOM_CUDA_CHECK(cudaGetDeviceProperties(&prop, device));
    sms_ = prop.multiProcessorCount;
    // FP32 lanes per SM: 64 on sm_70 and sm_80 (V100, A100), 128 on sm_86 and later (H100).
    fp32_lanes_ = (prop.major < 8 || (prop.major == 8 && prop.minor == 0)) ? 64 : 128;
    major_ = prop.major;
    minor_ = prop.minor;
    // Dense 16-bit tensor-core FLOP per clock per SM (peak_flops has the sources).
    tensor_flop_per_clock_ = prop.major >= 9 ? 4096 : prop.major == 8 ? 2048 : prop.major == 7 ? 1024 : 0;
    // Scratch for cuBLASLt (32 MiB, what Hopper kernels like) and the ops' partial sums; grown
    // on demand by Context::workspace().
    ctx_.workspace(size_t(32) << 20);
  }
  ~CudaBackend() override {
    cudaStreamSynchronize(copy_stream_);
    cudaStreamSynchronize(ctx_.stream);
    ctx_.free_scratch();
    cublasLtDestroy(ctx_.lt);
    cudaEventDestroy(copy_mark_);
    cudaEventDestroy(compute_mark_);
    cudaStreamDestroy(copy_stream_);
    cudaStreamDestroy(ctx_.stream);
  }

  std::string name() const override { return "cuda"; }
  std::string device_pci_bus_id() const override {
    char id[32] = {};
    if (cudaDeviceGetPCIBusId(id, int(sizeof id), device_) != cudaSuccess) return "";
    return id;
  }
  std::string device_uuid() const override {
    cudaDeviceProp prop{};
    if (cudaGetDeviceProperties(&prop, device_) != cudaSuccess) {
      (void)cudaGetLastError();  // not sticky, but the next launch check must not see it
      return "";
    }
    static const char hex[] = "0123456789abcdef";
    std::string out = "GPU-";
    for (int i = 0; i < 16; ++i) {
      if (i == 4 || i == 6 || i == 8 || i == 10) out += '-';  // 8-4-4-4-12 hex digits
      const auto b = static_cast<unsigned char>(prop.uuid.bytes[i]);
      out += hex[b >> 4];
      out += hex[b & 15];
    }
    return out;
  }
  double peak_flops(DType compute) override {
    int clock_khz = 0;
    cudaDeviceGetAttribute(&clock_khz, cudaDevAttrClockRate, device_);
    const double clock_hz = double(clock_khz) * 1e3;
    // fp32 (no tensor cores: CUBLAS_COMPUTE_32F without TF32) dense peak: SMs x FP32 lanes x 2
    // FLOP (FMA) x clock.
    if (compute == DType::f32 || tensor_flop_per_clock_ == 0) return double(sms_) * fp32_lanes_ * 2.0 * clock_hz;
    // bf16/fp16 inputs with fp32 accumulation on the tensor cores, dense (no 2:4 sparsity):
    // SMs x FLOP per clock per SM x clock. Per SM: 4096 on sm_90 (H100 SXM: 132 SMs x 4096 x
    // 1.83 GHz = 989.4 TFLOP/s, NVIDIA's dense BF16 figure; glennklockwood.com/garden/processors/h100
    // lists 989.4 dense at 1.83 GHz), 2048 on sm_80 (A100: 108 x 2048 x 1.41 GHz = 312 TFLOP/s),
    // 1024 fp16 on sm_70 (V100: 80 x 1024 x 1.53 GHz = 125). The clock is the device's reported
    // maximum (1.98 GHz on H100 SXM, against the 1.83 GHz of NVIDIA's tensor figures): an upper
    // bound, so MFU is not overstated. Consumer sm_86/89 parts run fp32-accumulate at a lower
    // rate than sm_80; they are counted as sm_80 (an overestimate of the peak); sm_100 and later
    // as sm_90 (an underestimate). Before sm_70: the fp32 peak.
    return double(sms_) * tensor_flop_per_clock_ * clock_hz;
  }
  std::string precision_note(DType compute) const override {
    if (compute == DType::bf16 && major_ < 8)
      return "this GPU (sm_" + std::to_string(major_ * 10 + minor_) +
             ") has no bf16 tensor cores: bf16 matmuls run without them, far below the bf16 peak";
    if (compute == DType::f16 && major_ < 7)
      return "this GPU (sm_" + std::to_string(major_ * 10 + minor_) + ") has no fp16 tensor cores";
    return "";
  }

  void* alloc_bytes(size_t bytes) override {
    void* p = LOOM_CUDA_MALLOC(std::max<size_t>(bytes, 4));
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

  // Offload staging: page-locked host memory, and copies on copy_stream_ that start once the
  // compute stream has reached the point of the call (compute_mark_) and let later ops run
  // meanwhile. Both events are re-recorded by every call: a stream wait takes the record current
  // when it is queued.
  void* alloc_host_pinned(size_t bytes) override {
    bytes = std::max<size_t>(bytes, 4);
    void* p = nullptr;
    LOOM_CUDA_CHECK(cudaMallocHost(&p, bytes));
    std::memset(p, 0, bytes);
    return p;
  }
  void release_host_pinned(void* p) override {
    if (!p) return;
    cudaStreamSynchronize(copy_stream_);  // no copy still reads or writes it
    cudaFreeHost(p);
  }
  void copy_to_host_async(void* dst, const void* src, size_t bytes) override {
    copy_after_compute(dst, src, bytes, cudaMemcpyDeviceToHost);
  }
  void copy_from_host_async(void* dst, const void* src, size_t bytes) override {
    if (!bytes) return;
    copy_after_compute(dst, src, bytes, cudaMemcpyHostToDevice);
    // Ops queued on the compute stream from now on start after the copy has landed.
    LOOM_CUDA_CHECK(cudaEventRecord(copy_mark_, copy_stream_));
    LOOM_CUDA_CHECK(cudaStreamWaitEvent(ctx_.stream, copy_mark_, 0));
  }
  void wait_host_copies() override { LOOM_CUDA_CHECK(cudaStreamSynchronize(copy_stream_)); }
  void synchronize() override { LOOM_CUDA_CHECK(cudaStreamSynchronize(ctx_.stream)); }
  void* stream() override { return ctx_.stream; }
  size_t attention_saved_bytes(int B, int T, int NH, DType) const override {
    return size_t(B) * NH * T * sizeof(float);  // the log-sum-exp, fp32 whatever the compute dtype
  }

  // Every op of kernels/backend_ops.def: the launcher of the same name (ops.cuh), with the
  // context. The launchers take the typed pointers as they are and check their dtypes.
#define LOOM_OP(RET, NAME, PARAMS, ARGS) \
  RET NAME PARAMS override { return cuda::NAME(LOOM_CUDA_UNPAREN ARGS, ctx_); }
#include "kernels/backend_op_types.inc"
#include "kernels/backend_ops.def"

 private:
  void copy(void* dst, const void* src, size_t bytes, cudaMemcpyKind kind) {
    if (!bytes) return;
    LOOM_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, kind, ctx_.stream));
    LOOM_CUDA_CHECK(cudaStreamSynchronize(ctx_.stream));  // host buffers may be reused on return
  }
  // On copy_stream_, after everything queued on the compute stream so far; returns at once.
  void copy_after_compute(void* dst, const void* src, size_t bytes, cudaMemcpyKind kind) {
    if (!bytes) return;
    LOOM_CUDA_CHECK(cudaEventRecord(compute_mark_, ctx_.stream));
    LOOM_CUDA_CHECK(cudaStreamWaitEvent(copy_stream_, compute_mark_, 0));
    LOOM_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, kind, copy_stream_));
  }

  int device_ = 0, sms_ = 0, fp32_lanes_ = 128, major_ = 0, minor_ = 0, tensor_flop_per_clock_ = 0;
  cuda::Context ctx_;  // the stream, the cuBLASLt handle and the scratch the ops borrow
  // The offload copies' stream; compute_mark_ orders a copy after the compute stream's queued
  // work, copy_mark_ the compute stream's later work after a copy to the device.
  cudaStream_t copy_stream_ = nullptr;
  cudaEvent_t compute_mark_ = nullptr, copy_mark_ = nullptr;
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
