// The CPU reference backend: host memory, the templated ops of cpu_ops.hpp at float (one per
// entry of kernels/backend_ops.def), and a measured sgemm rate as the MFU denominator.
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

  double peak_flops() override {
    if (peak_ == 0) peak_ = measure_sgemm_flops(1536, 5);
    return peak_;
  }

  float* alloc(size_t n) override { return static_cast<float*>(aligned_zeroed(n * sizeof(float))); }
  int32_t* alloc_i32(size_t n) override { return static_cast<int32_t*>(aligned_zeroed(n * sizeof(int32_t))); }
  void release(void* p) override { std::free(p); }
  void upload(float* dst, const float* src, size_t n) override { std::memcpy(dst, src, n * sizeof(float)); }
  void upload_i32(int32_t* dst, const int32_t* src, size_t n) override {
    std::memcpy(dst, src, n * sizeof(int32_t));
  }
  void download(float* dst, const float* src, size_t n) override { std::memcpy(dst, src, n * sizeof(float)); }
  size_t attention_saved_floats(int B, int T, int NH) const override {
    return static_cast<size_t>(B) * NH * T * T;  // the softmax probabilities
  }

  // Every op of kernels/backend_ops.def: the reference op of the same name at float.
#define LOOM_OP(RET, NAME, PARAMS, ARGS) \
  RET NAME PARAMS override { return cpu::NAME<Real> ARGS; }
#include "kernels/backend_ops.def"

 private:
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
