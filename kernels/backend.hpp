#pragma once
// The compute backend interface. The model in engine/ is written once against these ops; the
// CPU reference (kernels/cpu) and the CUDA backend (kernels/cuda) implement them. Nothing here
// knows about MPI or about the model's structure: ops see typed pointers and sizes.
//
// The ops, their contracts and the conventions all backends share (layouts, accumulated versus
// overwritten gradients, dimension letters) are listed once, in kernels/backend_ops.def; this
// class declares them from that list. What is written by hand here is memory, streams and
// queries, which each backend implements in its own way.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <new>
#include <string>
#include <vector>

#include "kernels/dtype.hpp"

namespace loom {

class Backend {
 public:
  virtual ~Backend() = default;
  virtual std::string name() const = 0;
  // Peak FLOP/s the backend can sustain on dense matmuls whose inputs are `compute` (fp32, bf16
  // or fp16): the MFU denominator, unless LOOM_PEAK_TFLOPS replaces it (engine/train/mfu_peak.hpp).
  virtual double peak_flops(DType compute) = 0;
  // One line on how this backend runs `compute` when it matters to the user (e.g. "this CPU has
  // no avx512_bf16: bf16 matmuls are emulated"), or "" when there is nothing to say.
  virtual std::string precision_note(DType /*compute*/) const { return ""; }

  // ---- memory (bytes; the typed helpers below are written in terms of these) ----
  virtual void* alloc_bytes(size_t bytes) = 0;  // zero-filled
  virtual void release(void* p) = 0;
  virtual void copy_from_host(void* dst, const void* host_src, size_t bytes) = 0;
  virtual void copy_to_host(void* host_dst, const void* src, size_t bytes) = 0;

  // n elements of `dtype`, zero-filled.
  TypedPtr alloc(DType dtype, size_t n) { return {alloc_bytes(n * dtype_size(dtype)), dtype}; }
  float* alloc(size_t n) { return static_cast<float*>(alloc_bytes(n * sizeof(float))); }
  int32_t* alloc_i32(size_t n) { return static_cast<int32_t*>(alloc_bytes(n * sizeof(int32_t))); }
  void upload(float* dst, const float* host_src, size_t n) { copy_from_host(dst, host_src, n * sizeof(float)); }
  void upload_i32(int32_t* dst, const int32_t* host_src, size_t n) {
    copy_from_host(dst, host_src, n * sizeof(int32_t));
  }
  void download(float* host_dst, const float* src, size_t n) { copy_to_host(host_dst, src, n * sizeof(float)); }

  // ---- host staging for optimizer offload (optim.offload: cpu) ----
  // Host memory the device copies to and from without a bounce buffer: page-locked
  // (cudaMallocHost) on CUDA, ordinary host memory on the CPU; zero-filled, 64-byte aligned at
  // least. Host memory on every backend: the CPU reads and writes it, ops never take it. Released
  // by release_host_pinned (null is ignored), which first waits for this backend's async copies.
  virtual void* alloc_host_pinned(size_t bytes) { return alloc_host_default(bytes); }
  virtual void release_host_pinned(void* p) { std::free(p); }
  // Asynchronous copies between device memory and host memory (pinned, for the copy to overlap
  // compute; pageable memory works but the copy may then block). Both are ordered after all work
  // queued on the backend's stream before the call, and run on a separate copy stream, so ops
  // queued after the call overlap them. Copies issued by these two run in the order issued.
  //   copy_to_host_async: host_dst holds the data once wait_host_copies() has returned. Ops
  //     queued after the call must not write `src` before then (nothing orders them after it).
  //   copy_from_host_async: ops queued on the backend's stream after the call see the copied
  //     data (the stream waits for the copy). host_src must stay unchanged until
  //     wait_host_copies() returns.
  // The defaults (a backend with no copy stream) copy synchronously, finished on return; the CPU
  // backend copies with memcpy at once.
  virtual void copy_to_host_async(void* host_dst, const void* src, size_t bytes) { copy_to_host(host_dst, src, bytes); }
  virtual void copy_from_host_async(void* dst, const void* host_src, size_t bytes) {
    copy_from_host(dst, host_src, bytes);
  }
  // Returns when every copy issued by copy_to_host_async/copy_from_host_async so far has
  // completed (CUDA: the copy stream synchronised). Does not wait for the ops.
  virtual void wait_host_copies() {}

  // Returns when every op queued so far has completed (not the async copies to the host).
  virtual void synchronize() {}
  // The stream the ops run on (a cudaStream_t on CUDA; null on the CPU): device-buffer
  // communicators order their work after it.
  virtual void* stream() { return nullptr; }
  // The PCI bus id ("0000:3b:00.0") of the device the ops run on; "" on the CPU. NVML finds the
  // same GPU by it, whatever CUDA_VISIBLE_DEVICES renumbered.
  virtual std::string device_pci_bus_id() const { return ""; }
  // The device's UUID (cudaDeviceProp::uuid, written as nvidia-smi writes a GPU's: "GPU-8c3e...";
  // a MIG instance has its own); "" on the CPU. One GPU has one UUID in every process that sees
  // it, whatever CUDA_VISIBLE_DEVICES renumbered: how ranks find out they were given the same one.
  virtual std::string device_uuid() const { return ""; }

  // Size of attention_forward's `saved` (what attention_backward needs) in bytes, for the compute
  // dtype `dtype`: backend-specific.
  virtual size_t attention_saved_bytes(int B, int T, int NH, DType dtype) const = 0;

  // ---- the ops (zero, forward and backward ops, optimizer, reductions): kernels/backend_ops.def ----
#define LOOM_OP(RET, NAME, PARAMS, ARGS) virtual RET NAME PARAMS = 0;
#include "kernels/backend_op_types.inc"
#include "kernels/backend_ops.def"

 protected:
  // alloc_host_pinned's default: zero-filled host memory, 64-byte aligned, freed by std::free.
  static void* alloc_host_default(size_t bytes) {
    constexpr size_t kAlign = 64;
    bytes = bytes == 0 ? kAlign : (bytes + kAlign - 1) / kAlign * kAlign;
    void* p = std::aligned_alloc(kAlign, bytes);
    if (!p) throw std::bad_alloc();
    std::memset(p, 0, bytes);
    return p;
  }
};

// The CPU reference backend (Eigen + OpenBLAS + OpenMP). Always available.
std::unique_ptr<Backend> make_cpu_backend();

// The fp32 scratch the CPU backend's 16-bit ops keep once a model has run a forward and a
// backward pass (per-thread buffers that grow to the largest op's need and stay), on this
// machine: where oneDNN cannot run the dtype's matmuls (bf16 before AVX512_BF16, fp16 before
// AVX512_FP16), every linear layer's input, weight and output widened to fp32 on the calling
// thread, and attention widened head by head on every thread (about 2 T^2 floats each); with
// oneDNN's bf16 attention, its score and d(score) blocks on the calling thread; on every
// thread, rows of LayerNorm and of the logits. None for fp32. loom plan's CPU workspace.
struct CpuLinearShape {
  int in = 0, out = 0;
  bool bias = true;  // a bias in the forward
  bool dinp = true;  // an input gradient in the backward
};
struct CpuScratchShapes {
  DType compute = DType::f32;
  int threads = 1;                      // OpenMP threads of the rank
  int rows = 0;                         // the linear layers' rows: micro-batch x sequence
  std::vector<CpuLinearShape> linears;  // each distinct shape once is enough
  int batch = 0, seq = 0, heads = 0;    // attention: the rank's heads
  int attention_width = 0;              // the rank's heads x head size
  int width = 0;                        // d_model: LayerNorm and the embeddings
  int logits_row = 0;                   // the rank's padded vocabulary columns (0: no loss here)
};
size_t cpu_scratch_bytes(const CpuScratchShapes& s);
// True where the CPU backend's matmuls in `compute` widen to fp32 and run through sgemm: 16 bits
// that this machine's oneDNN cannot run (bf16 before AVX-512, fp16 before AVX512_FP16; no oneDNN
// in the build), or LOOM_CPU_MATMUL=reference. Such a run goes at about the fp32 rate.
bool cpu_matmul_widens(DType compute);
// What the CPU backend's fp32 scratch holds now, over all threads (for the test of the above).
size_t cpu_scratch_held_bytes();

// Measured single-precision gemm rate of this machine: the best of `reps` n x n x n products, FLOP/s.
double measure_sgemm_flops(int n, int reps);
// The same for the CPU backend's bf16 matmul (bf16 inputs and output, fp32 accumulation: oneDNN
// where the build has it, else widened to fp32 and sgemm), FLOP/s.
double measure_bf16_gemm_flops(int n, int reps);

}  // namespace loom
