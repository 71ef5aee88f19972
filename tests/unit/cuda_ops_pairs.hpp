#pragma once
// What the CUDA op tests share (test_cuda_ops.cpp, test_cuda_ops_16bit.cpp,
// test_cuda_ops_finetune.cpp, one binary): a buffer on both backends with the device copy
// between guard regions (Pair, IntPair, and for 16-bit compute Act16), the element-by-element
// comparison and the two backends. The tolerances are explained in test_cuda_ops.cpp (fp32) and
// test_cuda_ops_16bit.cpp (16-bit).
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "kernels/backend.hpp"
#include "kernels/cuda/cuda_backend.hpp"

namespace loom::cuda_test {

inline constexpr float kTol = 1e-4f;
inline constexpr size_t kGuard = 64;
inline constexpr float kSentinel = 1234.5f;

// A buffer on both backends with the same contents, the device copy between guard regions.
struct Pair {
  Backend& cpu;
  Backend& gpu;
  size_t n;
  float* c;
  float* g_base;
  float* g;
  size_t lead;  // guard floats before the data: kGuard + `misalign`, so the device view can be
               // only 4- or 8-byte aligned, as views into the model's flat buffers are
  Pair(Backend& cpu_, Backend& gpu_, const std::vector<float>& init, size_t misalign = 0)
      : cpu(cpu_), gpu(gpu_), n(init.size()), lead(kGuard + misalign) {
    c = cpu.alloc(n);
    cpu.upload(c, init.data(), n);
    g_base = gpu.alloc(n + lead + kGuard);
    std::vector<float> guarded(n + lead + kGuard, kSentinel);
    std::copy(init.begin(), init.end(), guarded.begin() + long(lead));
    gpu.upload(g_base, guarded.data(), guarded.size());
    g = g_base + lead;
  }
  ~Pair() {
    cpu.release(c);
    gpu.release(g_base);
  }
  // The device result equals the CPU one within kTol, is finite, and the guards are intact.
  void check(const char* what, float tol = kTol) const {
    std::vector<float> host(n + lead + kGuard), ref(n);
    gpu.download(host.data(), g_base, host.size());
    cpu.download(ref.data(), c, n);
    size_t bad = 0;
    double worst = 0;
    for (size_t i = 0; i < n; ++i) {
      const float x = host[lead + i], r = ref[i];
      const double err = std::fabs(double(x) - r) / std::max(1.0, std::fabs(double(r)));
      worst = std::max(worst, err);
      if (!std::isfinite(x) || err > tol) ++bad;
    }
    for (size_t i = 0; i < lead; ++i) {
      INFO(what << ": guard element " << i << " before the data overwritten");
      CHECK(host[i] == kSentinel);
    }
    for (size_t i = 0; i < kGuard; ++i) {
      INFO(what << ": guard element " << i << " after the data overwritten");
      CHECK(host[lead + n + i] == kSentinel);
    }
    INFO(what << ": " << bad << " of " << n << " elements differ (worst relative error " << worst << ")");
    CHECK(bad == 0);
  }
};

struct IntPair {
  Backend& cpu;
  Backend& gpu;
  int32_t* c;
  int32_t* g;
  IntPair(Backend& cpu_, Backend& gpu_, const std::vector<int32_t>& v) : cpu(cpu_), gpu(gpu_) {
    c = cpu.alloc_i32(v.size());
    g = gpu.alloc_i32(v.size());
    cpu.upload_i32(c, v.data(), v.size());
    gpu.upload_i32(g, v.data(), v.size());
  }
  ~IntPair() {
    cpu.release(c);
    gpu.release(g);
  }
};

// The two backends, made by main (test_cuda_ops.cpp) once a device is known to work.
inline std::unique_ptr<Backend> g_cpu, g_gpu;

// ---- 16-bit compute: a compute-dtype tensor on both backends ----

inline double unit_roundoff(DType dt) { return dt == DType::bf16 ? 1.0 / 256 : 1.0 / 2048; }
inline uint16_t to_bits(DType dt, float x) { return dt == DType::bf16 ? bf16::from_float(x) : fp16::from_float(x); }
inline float from_bits(DType dt, uint16_t b) {
  if (dt == DType::bf16) {
    bf16 h;
    h.bits = b;
    return float(h);
  }
  return fp16::to_float(b);
}
inline constexpr uint16_t kSentinel16 = 0x4d2a;

// |got - ref| <= atol + rtol * |ref| and finite, element by element; on failure the count, the
// largest absolute and relative errors and the first bad index.
inline void expect_close(const std::string& what, const float* got, const float* ref, size_t n, double atol, double rtol) {
  size_t bad = 0, first = n;
  double max_abs = 0, max_rel = 0;
  for (size_t i = 0; i < n; ++i) {
    const double e = std::fabs(double(got[i]) - ref[i]);
    max_abs = std::max(max_abs, e);
    if (ref[i] != 0) max_rel = std::max(max_rel, e / std::fabs(double(ref[i])));
    if (!std::isfinite(got[i]) || e > atol + rtol * std::fabs(double(ref[i]))) {
      if (!bad++) first = i;
    }
  }
  std::ostringstream first_bad;
  if (bad) first_bad << ", first at " << first << " (got " << got[first] << ", ref " << ref[first] << ")";
  INFO(what << ": " << bad << " of " << n << " bad (atol " << atol << ", rtol " << rtol << "); max abs " << max_abs
            << ", max rel " << max_rel << first_bad.str());
  CHECK(bad == 0);
}

// A compute-dtype tensor: the 16-bit-rounded values as fp32 on the CPU, the 16-bit bits on the
// device between guard regions (`misalign` extra guard elements: a 2-byte aligned view).
struct Act16 {
  Backend& cpu;
  Backend& gpu;
  DType dt;
  size_t n, lead;
  float* c;
  void* g_base;
  TypedPtr g;
  Act16(Backend& cpu_, Backend& gpu_, DType dt_, const std::vector<float>& init, size_t misalign = 0)
      : cpu(cpu_), gpu(gpu_), dt(dt_), n(init.size()), lead(kGuard + misalign) {
    std::vector<float> rounded(n);
    std::vector<uint16_t> bits(n + lead + kGuard, kSentinel16);
    for (size_t i = 0; i < n; ++i) {
      bits[lead + i] = to_bits(dt, init[i]);
      rounded[i] = from_bits(dt, bits[lead + i]);
    }
    c = cpu.alloc(n);
    cpu.upload(c, rounded.data(), n);
    g_base = gpu.alloc_bytes(bits.size() * 2);
    gpu.copy_from_host(g_base, bits.data(), bits.size() * 2);
    g = TypedPtr(static_cast<char*>(g_base) + lead * 2, dt);
  }
  ~Act16() {
    cpu.release(c);
    gpu.release(g_base);
  }
  // The device values as floats (guards checked on the way).
  std::vector<float> device(const std::string& what) const {
    std::vector<uint16_t> bits(n + lead + kGuard);
    gpu.copy_to_host(bits.data(), g_base, bits.size() * 2);
    size_t hit = 0;
    for (size_t i = 0; i < lead; ++i) hit += bits[i] != kSentinel16;
    for (size_t i = 0; i < kGuard; ++i) hit += bits[lead + n + i] != kSentinel16;
    INFO(what << ": " << hit << " guard elements overwritten");
    CHECK(hit == 0);
    std::vector<float> v(n);
    for (size_t i = 0; i < n; ++i) v[i] = from_bits(dt, bits[lead + i]);
    return v;
  }
  void check(const std::string& what, double atol, double rtol) const {
    std::vector<float> ref(n);
    cpu.download(ref.data(), c, n);
    const std::vector<float> got = device(what);
    expect_close(std::string(dtype_name(dt)) + " " + what, got.data(), ref.data(), n, atol, rtol);
  }
};

inline const DType k16BitTypes[] = {DType::bf16, DType::f16};

// Puts back the process's LayerNorm backward kernels when a test that switches them ends.
struct LayerNormBackwardKernelsRestored {
  const cuda::LayerNormBackwardKernels start = cuda::layernorm_backward_kernels();
  ~LayerNormBackwardKernelsRestored() { cuda::set_layernorm_backward_kernels(start); }
};

}  // namespace loom::cuda_test
