// The CUDA backend's tiled (flash) causal attention against the CPU reference backend: head
// sizes 64 and 128 (the tiled kernels' fast path), T not a multiple of the 64-row tile, several
// B and NH, fp32, bf16 and fp16 (bf16/fp16 on the tensor-core kernels, also on views that
// are not 16-byte aligned); forward output, log-sum-exp-driven backward (dqkv, overwritten
// over random initial values), guard regions around every device output, and bitwise-equal
// results when the backward runs twice (no atomics). Like test_cuda_ops, the binary reports
// itself skipped (exit 77) where no CUDA device is usable.
//
// Tolerances as in test_cuda_ops: fp32 1e-4 relative to max(1, |ref|) (summation order only);
// 16-bit: the CPU computes in fp32 on the 16-bit-rounded inputs, the device rounds its outputs
// once (2u for the forward, u the unit roundoff) and reads the rounded O in D = dO.O, an error of
// ~u sqrt(hs) carried into every gradient (4u sqrt(hs) absolute, 4u relative).
#define CATCH_CONFIG_RUNNER
#include <catch2/catch.hpp>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <string>
#include <tuple>
#include <vector>

#include "kernels/backend.hpp"
#include "kernels/cuda/cuda_backend.hpp"
#include "kernels/cuda/cuda_probe.hpp"
#include "tests/unit/normal_samples.hpp"

using namespace loom;

namespace {

constexpr size_t kGuard = 64;  // guard elements before and after every device output
constexpr uint16_t kSentinel = 0x4d2a;

std::unique_ptr<Backend> g_cpu, g_gpu;

// One element of dtype dt <-> float, as raw bytes (4 for fp32, 2 for bf16/fp16).
size_t esize(DType dt) { return dt == DType::f32 ? 4 : 2; }
void put(DType dt, char* dst, float x) {
  if (dt == DType::f32) {
    std::memcpy(dst, &x, 4);
  } else {
    const uint16_t b = dt == DType::bf16 ? bf16::from_float(x) : fp16::from_float(x);
    std::memcpy(dst, &b, 2);
  }
}
float get(DType dt, const char* src) {
  if (dt == DType::f32) {
    float x;
    std::memcpy(&x, src, 4);
    return x;
  }
  uint16_t b;
  std::memcpy(&b, src, 2);
  if (dt == DType::bf16) {
    bf16 h;
    h.bits = b;
    return float(h);
  }
  return fp16::to_float(b);
}

// A tensor on both backends: the values rounded to dt as fp32 on the CPU, dt on the device
// between guard regions (`misalign` extra elements before: a view that is only 2-byte aligned
// in 16 bits, which the tensor-core kernels stage without 16-byte loads).
struct Tensor {
  DType dt;
  size_t n, lead;
  float* c;
  void* g_base;
  TypedPtr g;
  Tensor(DType dt_, const std::vector<float>& init, size_t misalign = 0)
      : dt(dt_), n(init.size()), lead(kGuard + misalign) {
    const size_t es = esize(dt);
    std::vector<char> bytes((n + lead + kGuard) * es);
    for (size_t i = 0; i < bytes.size() / 2; ++i) std::memcpy(&bytes[2 * i], &kSentinel, 2);
    std::vector<float> rounded(n);
    for (size_t i = 0; i < n; ++i) {
      put(dt, &bytes[(lead + i) * es], init[i]);
      rounded[i] = get(dt, &bytes[(lead + i) * es]);
    }
    c = g_cpu->alloc(n);
    g_cpu->upload(c, rounded.data(), n);
    g_base = g_gpu->alloc_bytes(bytes.size());
    g_gpu->copy_from_host(g_base, bytes.data(), bytes.size());
    g = TypedPtr(static_cast<char*>(g_base) + lead * es, dt);
  }
  ~Tensor() {
    g_cpu->release(c);
    g_gpu->release(g_base);
  }
  std::vector<char> raw() const {
    std::vector<char> bytes((n + lead + kGuard) * esize(dt));
    g_gpu->copy_to_host(bytes.data(), g_base, bytes.size());
    return bytes;
  }
  // The device values within atol + rtol |ref| of the CPU's, finite, guards untouched.
  void check(const std::string& what, double atol, double rtol) const {
    const std::vector<char> bytes = raw();
    std::vector<float> ref(n);
    g_cpu->download(ref.data(), c, n);
    const size_t es = esize(dt);
    size_t bad = 0, first = n, guards = 0;
    double worst = 0;
    for (size_t i = 0; i < n; ++i) {
      const float x = get(dt, &bytes[(lead + i) * es]);
      const double e = std::fabs(double(x) - ref[i]);
      worst = std::max(worst, e / (atol + rtol * std::fabs(double(ref[i]))));
      if (!std::isfinite(x) || e > atol + rtol * std::fabs(double(ref[i]))) {
        if (!bad++) first = i;
      }
    }
    for (size_t i = 0; i < lead * es / 2; ++i) {
      uint16_t x;
      std::memcpy(&x, &bytes[2 * i], 2);
      guards += x != kSentinel;
    }
    for (size_t i = 0; i < kGuard * es / 2; ++i) {
      uint16_t x;
      std::memcpy(&x, &bytes[(lead + n) * es + 2 * i], 2);
      guards += x != kSentinel;
    }
    INFO(what << " (" << dtype_name(dt) << "): " << bad << " of " << n << " outside atol " << atol << " + rtol "
              << rtol << " (worst at " << worst << " of the tolerance, first bad " << first << "); " << guards
              << " guard elements overwritten");
    CHECK(bad == 0);
    CHECK(guards == 0);
  }
};

double unit_roundoff(DType dt) { return dt == DType::bf16 ? 1.0 / 256 : dt == DType::f16 ? 1.0 / 2048 : 0.0; }

void run_case(DType dt, int B, int T, int NH, int hs, size_t misalign = 0) {
  const int C = NH * hs;
  const size_t n3 = size_t(B) * T * 3 * C, n1 = size_t(B) * T * C;
  INFO("B " << B << ", T " << T << ", NH " << NH << ", hs " << hs << ", " << dtype_name(dt) << ", views misaligned by "
            << misalign << " elements");
  Tensor qkv(dt, randn(n3, 70 + T, dt == DType::f32 ? 1.0f : 0.5f), misalign), out(dt, randn(n1, 71, 1.0f), misalign);
  float* saved_c = static_cast<float*>(g_cpu->alloc_bytes(g_cpu->attention_saved_bytes(B, T, NH, DType::f32)));
  void* saved_g = g_gpu->alloc_bytes(g_gpu->attention_saved_bytes(B, T, NH, dt));
  g_cpu->attention_forward(out.c, saved_c, qkv.c, B, T, C, NH);
  g_gpu->attention_forward(out.g, saved_g, qkv.g, B, T, C, NH);
  const double u = unit_roundoff(dt);
  if (dt == DType::f32)
    out.check("attention_forward", 1e-4, 1e-4);
  else
    out.check("attention_forward", 2 * u, 2 * u);
  Tensor dout(dt, randn(n1, 72, 1.0f), misalign), dqkv(dt, randn(n3, 73, 1.0f), misalign);
  g_cpu->attention_backward(dqkv.c, dout.c, qkv.c, out.c, saved_c, B, T, C, NH);
  g_gpu->attention_backward(dqkv.g, dout.g, qkv.g, out.g, saved_g, B, T, C, NH);
  if (dt == DType::f32)
    dqkv.check("attention_backward dqkv", 1e-4, 1e-4);
  else
    dqkv.check("attention_backward dqkv", 4 * u * std::sqrt(double(hs)), 4 * u);
  const std::vector<char> first = dqkv.raw();
  g_gpu->attention_backward(dqkv.g, dout.g, qkv.g, out.g, saved_g, B, T, C, NH);
  INFO("the backward run twice gives the same bits");
  CHECK(dqkv.raw() == first);
  g_cpu->release(saved_c);
  g_gpu->release(saved_g);
}

// (B, T, NH, hs): one tile, a partial tile, several tiles with a partial last one, one row.
const std::tuple<int, int, int, int> kShapes[] = {{2, 100, 3, 64}, {3, 64, 1, 64}, {2, 257, 2, 64},
                                                  {1, 130, 2, 128}, {2, 1, 2, 128}, {1, 200, 3, 128}};

}  // namespace

TEST_CASE("CUDA flash attention fp32, head sizes 64 and 128, against the CPU", "[attention]") {
  for (auto [B, T, NH, hs] : kShapes) run_case(DType::f32, B, T, NH, hs);
}

TEST_CASE("CUDA flash attention bf16, head sizes 64 and 128, against the CPU", "[attention]") {
  for (auto [B, T, NH, hs] : kShapes) run_case(DType::bf16, B, T, NH, hs);
  run_case(DType::bf16, 2, 100, 3, 64, 1);
  run_case(DType::bf16, 1, 130, 2, 128, 1);
}

TEST_CASE("CUDA flash attention fp16, head sizes 64 and 128, against the CPU", "[attention]") {
  for (auto [B, T, NH, hs] : kShapes) run_case(DType::f16, B, T, NH, hs);
  run_case(DType::f16, 2, 100, 3, 64, 1);
}

TEST_CASE("CUDA attention with more heads than a grid's y holds (B x NH above 65535), against the CPU", "[attention]") {
  // The tiled kernels put B x NH in the grid's y, at most 65535 blocks: such a call goes to the
  // row kernels (a 1-D grid) instead of failing to launch.
  run_case(DType::bf16, 65600, 1, 1, 64);
}

int main(int argc, char** argv) {
  const cuda::DeviceProbe probe = cuda::probe_devices();
  if (probe.count == 0) {
    std::printf("SKIPPED: no usable CUDA device (%s): the CUDA attention was compiled but not run\n",
                probe.reason.c_str());
    return 77;
  }
  g_cpu = make_cpu_backend();
  g_gpu = make_cuda_backend(0);
  const int rc = Catch::Session().run(argc, argv);
  g_gpu.reset();
  g_cpu.reset();
  return rc;
}
