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
#include "kernels/cpu/cpu_ops.hpp"
#include "kernels/cpu/eigen_maps.hpp"
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

class CpuBackend final : public Backend {
 public:
  std::string name() const override { return "cpu"; }

  double peak_flops(DType) override {
    if (peak_ == 0) peak_ = measure_sgemm_flops(1536, 5);
    return peak_;
  }

  void* alloc_bytes(size_t bytes) override { return aligned_zeroed(bytes); }
  void release(void* p) override { std::free(p); }
  void copy_from_host(void* dst, const void* src, size_t bytes) override { std::memcpy(dst, src, bytes); }
  void copy_to_host(void* dst, const void* src, size_t bytes) override { std::memcpy(dst, src, bytes); }
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
  double peak_ = 0;
};

}  // namespace

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
