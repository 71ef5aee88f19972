// The CPU reference backend: host memory, the templated ops of cpu_ops.hpp (one per entry of
// kernels/backend_ops.def) at the dtype of each call's tensors, and a measured gemm rate as the
// MFU denominator.
#include <omp.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <algorithm>
#include <new>
#include <vector>

#include "kernels/backend.hpp"
#include "kernels/cpu/convert_simd.hpp"
#include "kernels/cpu/cpu_ops.hpp"
#include "kernels/cpu/eigen_maps.hpp"
#include "kernels/cpu/onednn_gemm.hpp"
#include "kernels/typed_dispatch.hpp"

namespace loom {
namespace {

constexpr size_t kAlign = 64;  // cache line; also what AVX-512 loads like

void* aligned_zeroed(size_t bytes) {
  bytes = (bytes + kAlign - 1) / kAlign * kAlign;
  if (bytes == 0) bytes = kAlign;
  void* p = std::aligned_alloc(kAlign, bytes);
  if (!p) throw std::bad_alloc();
  std::memset(p, 0, bytes);
  return p;
}

template <typename T>
double measure_gemm_flops(int n, int reps);

class CpuBackend final : public Backend {
 public:
  std::string name() const override { return "cpu"; }

  // fp32: the measured sgemm rate; bf16, fp16: the measured rate of the backend's own 16-bit
  // matmul (oneDNN where it runs the dtype, else the widening path). Measured once per dtype.
  double peak_flops(DType compute) override {
    if (compute == DType::f32) {
      if (peak_ == 0) peak_ = measure_sgemm_flops(1536, 5);
      return peak_;
    }
    double& p = compute == DType::f16 ? peak_f16_ : peak_bf16_;
    if (p == 0) p = compute == DType::f16 ? measure_gemm_flops<fp16>(1536, 5) : measure_bf16_gemm_flops(1536, 5);
    return p;
  }

  std::string precision_note(DType compute) const override {
    if (compute == DType::bf16) {
      if (!cpu::onednn::built())
        return "this build has no oneDNN (libdnnl-dev): bf16 matmuls are widened to fp32 and run through sgemm, "
               "slower than fp32";
      if (!cpu::onednn::supported(square_desc(DType::bf16, 64)))
        return "oneDNN has no bf16 matmul for this CPU (it needs AVX-512): bf16 matmuls are widened to fp32 and run "
               "through sgemm, slower than fp32";
      if (!cpu::onednn::cpu_has_native_bf16())
        return "this CPU has no avx512_bf16: oneDNN emulates the bf16 matmuls, slower than on a CPU with native bf16";
    }
    if (compute == DType::f16 && !cpu::onednn::supported(square_desc(DType::f16, 64)))
      return "oneDNN has no fp16 matmul for this CPU: fp16 matmuls are widened to fp32 and run through sgemm, "
             "slower than fp32";
    return "";
  }

  void* alloc_bytes(size_t bytes) override { return aligned_zeroed(bytes); }
  void release(void* p) override { std::free(p); }
  void copy_from_host(void* dst, const void* src, size_t bytes) override { std::memcpy(dst, src, bytes); }
  void copy_to_host(void* dst, const void* src, size_t bytes) override { std::memcpy(dst, src, bytes); }
  // Offload staging: device buffers are host memory, so "pinned" memory is ordinary memory and
  // the async copies are done at once (wait_host_copies has nothing to wait for).
  void* alloc_host_pinned(size_t bytes) override { return aligned_zeroed(bytes); }
  void release_host_pinned(void* p) override { std::free(p); }
  void copy_to_host_async(void* dst, const void* src, size_t bytes) override { std::memcpy(dst, src, bytes); }
  void copy_from_host_async(void* dst, const void* src, size_t bytes) override { std::memcpy(dst, src, bytes); }
  void wait_host_copies() override {}
  size_t attention_saved_bytes(int B, int T, int NH, DType dtype) const override {
    return static_cast<size_t>(B) * NH * T * T * dtype_size(dtype);  // the softmax probabilities
  }

  // Every op of kernels/backend_ops.def: the reference op of the same name at the dtype of the
  // call's typed tensors (typed_dispatch.hpp), each typed pointer checked against it.
#define LOOM_OP(RET, NAME, PARAMS, ARGS)                                                   \
  RET NAME PARAMS override {                                                             \
    return typed::dispatch(#NAME, typed::call_dtype ARGS, [&](auto tag) -> RET {             \
      using Storage = typename decltype(tag)::type; /* not T: an op parameter is T */    \
      return call_unwrapped(&cpu::NAME<Storage>, LOOM_TYPED_UNPAREN ARGS);               \
    });                                                                                  \
  }
#include "kernels/backend_op_types.inc"
#include "kernels/backend_ops.def"

 private:
  template <typename Fn, typename... A>
  static decltype(auto) call_unwrapped(Fn* fn, A&&... args) {
    return fn(typed::unwrap(std::forward<A>(args))...);
  }
  static cpu::onednn::GemmDesc square_desc(DType t, int n) {
    cpu::onednn::GemmDesc d;
    d.in = d.out = t;
    d.M = d.K = d.N = n;
    d.b_trans = true;
    return d;
  }
  double peak_ = 0, peak_bf16_ = 0, peak_f16_ = 0;
};

// The best of `reps` n x n x n products through cpu::matmul_forward<T> (the backend's own path
// for T, so the LOOM_CPU_MATMUL switch and a missing oneDNN show), FLOP/s.
template <typename T>
double measure_gemm_flops(int n, int reps) {
  std::vector<T> a(size_t(n) * n), b(size_t(n) * n), c(size_t(n) * n);
  uint32_t s = 12345;
  for (auto* v : {&a, &b})
    for (auto& x : *v) {
      s = s * 1664525u + 1013904223u;
      x = T(float(s >> 8) / float(1 << 24) - 0.5f);
    }
  cpu::matmul_forward<T>(c.data(), a.data(), b.data(), nullptr, n, n, n);  // warm-up, primitive creation
  double best = 1e30;
  for (int r = 0; r < reps; ++r) {
    auto t0 = std::chrono::steady_clock::now();
    cpu::matmul_forward<T>(c.data(), a.data(), b.data(), nullptr, n, n, n);
    best = std::min(best, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  // The widening path (fp16; bf16 without oneDNN) grew this thread's fp32 scratch to n x n:
  // give it back, or the run would keep 28 MB it never uses (the model's matmuls are smaller).
  cpu::release_fp32_scratch();
  return 2.0 * n * double(n) * n / best;
}

}  // namespace

double measure_bf16_gemm_flops(int n, int reps) { return measure_gemm_flops<bf16>(n, reps); }

double measure_sgemm_flops(int n, int reps) {
  cpu::RowMat<float> a = cpu::RowMat<float>::Random(n, n), b = cpu::RowMat<float>::Random(n, n), c(n, n);
  c.noalias() = a * b;  // warm-up: thread pool, page faults
  double best = 1e30;   // the best run: the rate the machine can sustain, not its noise
  for (int r = 0; r < reps; ++r) {
    auto t0 = std::chrono::steady_clock::now();
    c.noalias() = a * b;
    best = std::min(best, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  return 2.0 * n * double(n) * n / best;
}

std::unique_ptr<Backend> make_cpu_backend() { return std::make_unique<CpuBackend>(); }

}  // namespace loom
