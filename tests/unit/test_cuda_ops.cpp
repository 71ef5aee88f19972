// Every op of the CUDA backend against the CPU reference backend on the same inputs, on odd
// shapes (sizes that are not multiples of a warp, a block or a tile). Outputs sit between guard
// regions that must come back untouched (out-of-bounds writes), and every output is checked
// for NaN/Inf. Needs only the CUDA toolkit, Eigen and Catch2. Without a usable device the whole
// binary reports itself skipped (exit 77, CTest's SKIP_RETURN_CODE).
//
// Tolerance: both backends compute in fp32 but sum in different orders (blocked/tree reductions
// on the GPU, Eigen/OpenBLAS blocking on the CPU). For a sum of K terms the difference is bounded
// by ~K * eps * sum|terms| in the worst case and ~sqrt(K) * eps typically; with K <= ~1000 and
// eps = 6e-8 that is < 1e-4 relative to the magnitude of the terms, which is the bound used
// (kTol, relative to max(1, |reference|)). Exponentials (softmax, attention) add a few ulps.
#define CATCH_CONFIG_RUNNER
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "kernels/backend.hpp"
#include "kernels/cuda/cuda_backend.hpp"
#include "kernels/cuda/cuda_probe.hpp"
#include "kernels/quantize.hpp"
#include "tests/unit/normal_samples.hpp"

using namespace loom;

namespace {

constexpr float kTol = 1e-4f;
constexpr size_t kGuard = 64;
constexpr float kSentinel = 1234.5f;

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

std::unique_ptr<Backend> g_cpu, g_gpu;

}  // namespace

TEST_CASE("CUDA encoder forward/backward (vocab-parallel slice, repeated tokens)") {
  Backend &cpu = *g_cpu, &gpu = *g_gpu;
  for (auto [B, T, C, V, start, rows] : {std::tuple{3, 7, 37, 50, 0, 50}, std::tuple{2, 33, 96, 300, 128, 100}}) {
   for (bool with_wpe : {true, false}) {
    std::vector<int32_t> tok(size_t(B) * T);
    for (size_t i = 0; i < tok.size(); ++i) tok[i] = int32_t((i * 7919 + 13) % size_t(V)) % (i % 3 ? V : 5);
    IntPair tokens(cpu, gpu, tok);
    Pair wte(cpu, gpu, randn(size_t(rows) * C, 1)), wpe(cpu, gpu, randn(size_t(T) * C, 2));
    Pair out(cpu, gpu, randn(size_t(B) * T * C, 6));  // overwritten: must not keep these values
    cpu.encoder_forward(out.c, tokens.c, wte.c, with_wpe ? wpe.c : nullptr, B, T, C, start, rows);
    gpu.encoder_forward(out.g, tokens.g, wte.g, with_wpe ? wpe.g : nullptr, B, T, C, start, rows);
    out.check("encoder_forward");
    Pair dout(cpu, gpu, randn(size_t(B) * T * C, 3));
    Pair dwte(cpu, gpu, randn(size_t(rows) * C, 4)), dwpe(cpu, gpu, randn(size_t(T) * C, 5));  // accumulated into
    cpu.encoder_backward(dwte.c, with_wpe ? dwpe.c : nullptr, dout.c, tokens.c, B, T, C, start, rows);
    gpu.encoder_backward(dwte.g, with_wpe ? dwpe.g : nullptr, dout.g, tokens.g, B, T, C, start, rows);
    dwte.check("encoder_backward dwte");
    dwpe.check("encoder_backward dwpe");
   }
  }
}

TEST_CASE("CUDA layernorm forward/backward") {
  Backend &cpu = *g_cpu, &gpu = *g_gpu;
  for (auto [N, C] : {std::pair{17, 45}, std::pair{130, 768}}) {
    Pair inp(cpu, gpu, randn(size_t(N) * C, 10, 2.0f)), w(cpu, gpu, randn(size_t(C), 11)), b(cpu, gpu, randn(size_t(C), 12));
    // Outputs start as random values: an op that accumulated instead of overwriting would show.
    Pair out(cpu, gpu, randn(size_t(N) * C, 17)), mean(cpu, gpu, randn(size_t(N), 18)), rstd(cpu, gpu, randn(size_t(N), 19));
    cpu.layernorm_forward(out.c, mean.c, rstd.c, inp.c, w.c, b.c, N, C);
    gpu.layernorm_forward(out.g, mean.g, rstd.g, inp.g, w.g, b.g, N, C);
    out.check("layernorm_forward out");
    mean.check("layernorm_forward mean");
    rstd.check("layernorm_forward rstd");
    Pair dout(cpu, gpu, randn(size_t(N) * C, 13)), dinp(cpu, gpu, randn(size_t(N) * C, 14));
    Pair dw(cpu, gpu, randn(size_t(C), 15)), db(cpu, gpu, randn(size_t(C), 16));
    cpu.layernorm_backward(dinp.c, dw.c, db.c, dout.c, inp.c, w.c, mean.c, rstd.c, N, C);
    gpu.layernorm_backward(dinp.g, dw.g, db.g, dout.g, inp.g, w.g, mean.g, rstd.g, N, C);
    dinp.check("layernorm_backward dinp (accumulated)");
    dw.check("layernorm_backward dw");
    db.check("layernorm_backward db");
  }
}

TEST_CASE("CUDA matmul forward/backward through cuBLASLt, with and without bias") {
  Backend &cpu = *g_cpu, &gpu = *g_gpu;
  for (auto [N, C, OC] : {std::tuple{19, 33, 47}, std::tuple{128, 96, 288}, std::tuple{5, 1, 3}}) {
   // Device views aligned to 256 bytes, and to only 4 and 8 (weights are views into a flat buffer).
   for (size_t mis : {size_t(0), size_t(1), size_t(2)}) {
    for (bool with_bias : {true, false}) {
      Pair inp(cpu, gpu, randn(size_t(N) * C, 20), mis), w(cpu, gpu, randn(size_t(OC) * C, 21, 0.1f), mis),
          bias(cpu, gpu, randn(size_t(OC), 22), mis);
      Pair out(cpu, gpu, randn(size_t(N) * OC, 26), mis);
      cpu.matmul_forward(out.c, inp.c, w.c, with_bias ? bias.c : nullptr, N, C, OC);
      gpu.matmul_forward(out.g, inp.g, w.g, with_bias ? bias.g : nullptr, N, C, OC);
      out.check("matmul_forward");
      Pair dout(cpu, gpu, randn(size_t(N) * OC, 23), mis), dinp(cpu, gpu, randn(size_t(N) * C, 27), mis);
      Pair dw(cpu, gpu, randn(size_t(OC) * C, 24), mis), dbias(cpu, gpu, randn(size_t(OC), 25), mis);
      cpu.matmul_backward(dinp.c, dw.c, with_bias ? dbias.c : nullptr, dout.c, inp.c, w.c, N, C, OC);
      gpu.matmul_backward(dinp.g, dw.g, with_bias ? dbias.g : nullptr, dout.g, inp.g, w.g, N, C, OC);
      dinp.check("matmul_backward dinp");
      dw.check("matmul_backward dw (accumulated)");
      dbias.check("matmul_backward dbias (accumulated)");
    }
   }
  }
}

TEST_CASE("CUDA fused causal attention forward/backward") {
  Backend &cpu = *g_cpu, &gpu = *g_gpu;
  // Head sizes 16, 64, 8, 40 (a partly used second register slot) and 256 (the limit).
  for (auto [B, T, C, NH] : {std::tuple{2, 13, 48, 3}, std::tuple{1, 65, 128, 2}, std::tuple{3, 1, 40, 5},
                             std::tuple{2, 17, 120, 3}, std::tuple{1, 5, 256, 1}}) {
    Pair qkv(cpu, gpu, randn(size_t(B) * T * 3 * C, 30));
    Pair out(cpu, gpu, randn(size_t(B) * T * C, 33));
    std::vector<float> saved_c_init(cpu.attention_saved_bytes(B, T, NH, loom::DType::f32) / sizeof(float)), saved_g_init(gpu.attention_saved_bytes(B, T, NH, loom::DType::f32) / sizeof(float));
    float* saved_c = cpu.alloc(saved_c_init.size() + 1);
    float* saved_g = gpu.alloc(saved_g_init.size() + 1);
    cpu.attention_forward(out.c, saved_c, qkv.c, B, T, C, NH);
    gpu.attention_forward(out.g, saved_g, qkv.g, B, T, C, NH);
    out.check("attention_forward");
    Pair dout(cpu, gpu, randn(size_t(B) * T * C, 31)), dqkv(cpu, gpu, randn(size_t(B) * T * 3 * C, 32));
    cpu.attention_backward(dqkv.c, dout.c, qkv.c, out.c, saved_c, B, T, C, NH);
    gpu.attention_backward(dqkv.g, dout.g, qkv.g, out.g, saved_g, B, T, C, NH);
    dqkv.check("attention_backward dqkv (overwritten)");
    cpu.release(saved_c);
    gpu.release(saved_g);
  }
}

TEST_CASE("CUDA elementwise: GELU, residual, scale, AdamW") {
  Backend &cpu = *g_cpu, &gpu = *g_gpu;
  const size_t n = 100003;
  Pair x(cpu, gpu, randn(n, 40, 3.0f)), y(cpu, gpu, randn(n, 41)), out(cpu, gpu, randn(n, 46));
  cpu.gelu_forward(out.c, x.c, n);
  gpu.gelu_forward(out.g, x.g, n);
  out.check("gelu_forward");
  Pair d(cpu, gpu, randn(n, 42));
  cpu.gelu_backward(d.c, x.c, d.c, n);  // in place, as the model uses it
  gpu.gelu_backward(d.g, x.g, d.g, n);
  d.check("gelu_backward (in place)");
  cpu.residual_forward(out.c, x.c, y.c, n);
  gpu.residual_forward(out.g, x.g, y.g, n);
  out.check("residual_forward");
  cpu.scale(y.c, n, 0.37f);
  gpu.scale(y.g, n, 0.37f);
  y.check("scale");
  Pair p(cpu, gpu, randn(n, 43)), g(cpu, gpu, randn(n, 44)), m(cpu, gpu, randn(n, 45, 0.1f)),
      v(cpu, gpu, std::vector<float>(n, 0.01f));
  for (int64_t t = 1; t <= 3; ++t) {
    cpu.adamw_update(p.c, g.c, m.c, v.c, n, 1e-3f, 0.9f, 0.95f, 1e-8f, 0.1f, t);
    gpu.adamw_update(p.g, g.g, m.g, v.g, n, 1e-3f, 0.9f, 0.95f, 1e-8f, 0.1f, t);
  }
  p.check("adamw param");
  m.check("adamw m");
  v.check("adamw v");
}

TEST_CASE("CUDA fused softmax cross-entropy, whole and vocab-parallel, padding aware") {
  Backend &cpu = *g_cpu, &gpu = *g_gpu;
  const int N = 9, V = 101, Vp = 128;
  std::vector<int32_t> tgt(N);
  for (int i = 0; i < N; ++i) tgt[size_t(i)] = (i * 37 + 5) % V;
  IntPair targets(cpu, gpu, tgt);
  Pair logits(cpu, gpu, randn(size_t(N) * Vp, 50, 4.0f)), losses(cpu, gpu, std::vector<float>(N));
  cpu.softmax_crossentropy(losses.c, logits.c, targets.c, N, V, Vp, 0.25f, true);
  gpu.softmax_crossentropy(losses.g, logits.g, targets.g, N, V, Vp, 0.25f, true);
  losses.check("softmax_crossentropy losses");
  logits.check("softmax_crossentropy dlogits (padding zero)");
  Pair keep(cpu, gpu, randn(size_t(N) * Vp, 52, 4.0f)), l0(cpu, gpu, randn(N, 53));
  cpu.softmax_crossentropy(l0.c, keep.c, targets.c, N, V, Vp, 0.25f, false);
  gpu.softmax_crossentropy(l0.g, keep.g, targets.g, N, V, Vp, 0.25f, false);
  l0.check("softmax_crossentropy losses, no gradient");
  keep.check("softmax_crossentropy without write_grad leaves the logits alone");
  // Vocab-parallel: this rank holds columns [64, 128) of which 37 are real (101 - 64).
  const int Vl = 64, start = 64, v_real = V - start;
  Pair local(cpu, gpu, randn(size_t(N) * Vl, 51, 4.0f)), maxes(cpu, gpu, std::vector<float>(N)),
      partials(cpu, gpu, std::vector<float>(2 * N)), l2(cpu, gpu, std::vector<float>(N));
  cpu.crossentropy_max(maxes.c, local.c, N, Vl, v_real);
  gpu.crossentropy_max(maxes.g, local.g, N, Vl, v_real);
  maxes.check("crossentropy_max");
  cpu.crossentropy_partials(partials.c, local.c, maxes.c, targets.c, N, Vl, v_real, start);
  gpu.crossentropy_partials(partials.g, local.g, maxes.g, targets.g, N, Vl, v_real, start);
  partials.check("crossentropy_partials");
  cpu.crossentropy_finish(l2.c, local.c, maxes.c, partials.c, targets.c, N, Vl, v_real, start, 0.5f, true);
  gpu.crossentropy_finish(l2.g, local.g, maxes.g, partials.g, targets.g, N, Vl, v_real, start, 0.5f, true);
  l2.check("crossentropy_finish losses");
  local.check("crossentropy_finish dlogits");
  // A rank whose vocabulary slice is all padding (tp 4 on the tiny recipe): max -inf, sum 0,
  // target logit 0, and an all-zero gradient. (Compared directly: -inf is not "finite".)
  Pair pad(cpu, gpu, randn(size_t(N) * Vl, 54));
  std::vector<float> mx(N), gpu_mx(N);
  float* d_mx = gpu.alloc(N);
  gpu.crossentropy_max(d_mx, pad.g, N, Vl, 0);
  gpu.download(gpu_mx.data(), d_mx, N);
  for (float v : gpu_mx) CHECK(std::isinf(v));
  Pair zmax(cpu, gpu, std::vector<float>(N, 0.0f)), zpart(cpu, gpu, std::vector<float>(2 * N, 1.0f)),
      l3(cpu, gpu, randn(N, 55));
  cpu.crossentropy_finish(l3.c, pad.c, zmax.c, zpart.c, targets.c, N, Vl, 0, 128, 0.5f, true);
  gpu.crossentropy_finish(l3.g, pad.g, zmax.g, zpart.g, targets.g, N, Vl, 0, 128, 0.5f, true);
  pad.check("crossentropy_finish with no real columns: zero gradient");
  l3.check("crossentropy_finish with no real columns: losses");
  gpu.release(d_mx);
}

TEST_CASE("CUDA reductions are deterministic and match the CPU") {
  Backend &cpu = *g_cpu, &gpu = *g_gpu;
  for (size_t n : {size_t(1), size_t(1000), size_t(3000017)}) {
    Pair x(cpu, gpu, randn(n, 60));
    const double a = gpu.sum_squares(x.g, n), b = gpu.sum_squares(x.g, n);
    CHECK(a == b);  // bitwise, run to run
    CHECK(std::fabs(a - cpu.sum_squares(x.c, n)) <= 1e-9 * std::max(1.0, a));  // double accumulation
    CHECK(std::fabs(gpu.sum(x.g, n) - cpu.sum(x.c, n)) <= 1e-9 * std::max(1.0, a));
  }
}

TEST_CASE("CUDA offload staging: pinned memory, async copies ordered against the compute stream") {
  Backend &cpu = *g_cpu, &gpu = *g_gpu;
  for (size_t n : {size_t(1), size_t(17), size_t(1000003)}) {
    INFO("n " << n);
    const size_t bytes = n * sizeof(float);
    const std::vector<float> x = randn(n, 70);
    float* in = static_cast<float*>(gpu.alloc_host_pinned(bytes));
    float* out = static_cast<float*>(gpu.alloc_host_pinned(bytes));
    REQUIRE(in != nullptr);
    REQUIRE(out != nullptr);
    CHECK(std::count(out, out + n, 0.0f) == long(n));  // zero-filled
    std::copy(x.begin(), x.end(), in);
    // The device buffer starts random, between guards: a copy that did not land, or landed late,
    // or wrote outside it, shows. Host -> device; ops that must see the copied data (the compute
    // stream waits for the copy); device -> host after them; then 2^10 * x exactly.
    Pair d(cpu, gpu, randn(n, 71));
    gpu.copy_from_host_async(d.g, in, bytes);
    for (int k = 0; k < 10; ++k) gpu.scale(d.g, n, 2.0f);
    gpu.copy_to_host_async(out, d.g, bytes);
    // Work queued after the copy to the host, on a buffer the copy does not read: it may overlap
    // the copy, which does not wait for it.
    Pair other(cpu, gpu, randn(n, 72));
    gpu.scale(other.g, n, 3.0f);
    gpu.wait_host_copies();
    cpu.scale(other.c, n, 3.0f);
    other.check("scale queued behind an async copy");
    size_t bad = 0;
    for (size_t i = 0; i < n; ++i) bad += out[i] != 1024.0f * x[i];  // exact: powers of two
    CHECK(bad == 0);
    cpu.upload(d.c, x.data(), n);
    for (int k = 0; k < 10; ++k) cpu.scale(d.c, n, 2.0f);
    d.check("round trip through pinned memory");  // and the guards
    // Several copies in flight at once, in pieces, then one wait.
    std::fill(out, out + n, 0.0f);
    const size_t piece = (n + 2) / 3;
    for (size_t lo = 0; lo < n; lo += piece)
      gpu.copy_to_host_async(out + lo, d.g + lo, std::min(piece, n - lo) * sizeof(float));
    gpu.wait_host_copies();
    bad = 0;
    for (size_t i = 0; i < n; ++i) bad += out[i] != 1024.0f * x[i];
    CHECK(bad == 0);
    gpu.release_host_pinned(in);
    gpu.release_host_pinned(out);
  }
  void* empty = gpu.alloc_host_pinned(0);
  CHECK(empty != nullptr);
  gpu.release_host_pinned(empty);
  gpu.release_host_pinned(nullptr);
}

// ---- 16-bit compute (bf16, fp16) against the fp32 CPU reference ----
// The CPU runs its fp32 op on the 16-bit-rounded inputs (as floats); the device runs the op in
// the 16-bit dtype on the same bits. Both compute in fp32, so the device's Act outputs differ
// from the reference by their one rounding to 16 bits, at most u * |ref| (u the unit roundoff:
// 2^-8 bf16, 8 significant bits; 2^-11 fp16), plus fp32 noise: rtol = 2u (the factor 2 for fp32
// noise pushing a value across a rounding boundary). atol covers results that are small because
// terms of a few units cancel: u times that magnitude. fp32 outputs (LN statistics, dW, dbias,
// dwte, losses, CE partials) see only fp32 summation order, as the fp32 tests: kTol. The one place
// the device reuses a 16-bit intermediate that the CPU keeps in fp32 (attention backward reads
// the rounded forward output O in D = dO . O, a sum over the head size) gets tolerances scaled by
// sqrt(head size).
namespace {

double unit_roundoff(DType dt) { return dt == DType::bf16 ? 1.0 / 256 : 1.0 / 2048; }
uint16_t to_bits(DType dt, float x) { return dt == DType::bf16 ? bf16::from_float(x) : fp16::from_float(x); }
float from_bits(DType dt, uint16_t b) {
  if (dt == DType::bf16) {
    bf16 h;
    h.bits = b;
    return float(h);
  }
  return fp16::to_float(b);
}
constexpr uint16_t kSentinel16 = 0x4d2a;

// |got - ref| <= atol + rtol * |ref| and finite, element by element; on failure the count, the
// largest absolute and relative errors and the first bad index.
void expect_close(const std::string& what, const float* got, const float* ref, size_t n, double atol, double rtol) {
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

const DType k16BitTypes[] = {DType::bf16, DType::f16};

}  // namespace

TEST_CASE("CUDA 16-bit: encoder, zero, convert, dtype checks") {
  Backend &cpu = *g_cpu, &gpu = *g_gpu;
  for (DType dt : k16BitTypes) {
    const double u = unit_roundoff(dt);
    const int B = 2, T = 33, C = 96, start = 128, rows = 100;
    std::vector<int32_t> tok(size_t(B) * T);
    for (size_t i = 0; i < tok.size(); ++i) tok[i] = int32_t((i * 7919 + 13) % 300) % (i % 3 ? 300 : 5);
    IntPair tokens(cpu, gpu, tok);
    Act16 wte(cpu, gpu, dt, randn(size_t(rows) * C, 1)), wpe(cpu, gpu, dt, randn(size_t(T) * C, 2));
    Act16 out(cpu, gpu, dt, randn(size_t(B) * T * C, 6));
    cpu.encoder_forward(out.c, tokens.c, wte.c, wpe.c, B, T, C, start, rows);
    gpu.encoder_forward(out.g, tokens.g, wte.g, wpe.g, B, T, C, start, rows);
    out.check("encoder_forward", 4 * u, 2 * u);  // wte + wpe, terms of a few units
    Act16 dout(cpu, gpu, dt, randn(size_t(B) * T * C, 3));
    Pair dwte(cpu, gpu, randn(size_t(rows) * C, 4)), dwpe(cpu, gpu, randn(size_t(T) * C, 5));
    cpu.encoder_backward(dwte.c, dwpe.c, dout.c, tokens.c, B, T, C, start, rows);
    gpu.encoder_backward(dwte.g, dwpe.g, dout.g, tokens.g, B, T, C, start, rows);
    dwte.check("16-bit encoder_backward dwte (fp32, accumulated)");
    dwpe.check("16-bit encoder_backward dwpe (fp32, accumulated)");

    // zero: n elements of the dtype, nothing beyond.
    gpu.zero(out.g, out.n);
    const std::vector<float> z = out.device("zero");
    CHECK(std::count(z.begin(), z.end(), 0.0f) == long(z.size()));

    // convert fp32 -> 16 bit rounds to nearest even exactly as the host types do.
    const std::vector<float> x = randn(10001, 7, 300.0f);
    float* xf = gpu.alloc(x.size());
    gpu.upload(xf, x.data(), x.size());
    const TypedPtr x16 = gpu.alloc(dt, x.size());
    gpu.convert(x16, xf, x.size());
    std::vector<uint16_t> bits(x.size());
    gpu.copy_to_host(bits.data(), x16.data, bits.size() * 2);
    size_t wrong = 0;
    for (size_t i = 0; i < x.size(); ++i) wrong += bits[i] != to_bits(dt, x[i]);
    CHECK(wrong == 0);
    gpu.release(x16.data);
    gpu.release(xf);

    // Act tensors of different dtypes in one call: a logic_error naming the op.
    float* f = gpu.alloc(16);
    CHECK_THROWS_AS(gpu.gelu_forward(out.g, f, 16), std::logic_error);
    CHECK_THROWS_WITH(gpu.residual_forward(f, out.g, f, 16), Catch::Contains("residual_forward"));
    gpu.release(f);
  }
}

TEST_CASE("CUDA 16-bit: layernorm, GELU, residual") {
  Backend &cpu = *g_cpu, &gpu = *g_gpu;
  for (DType dt : k16BitTypes) {
    const double u = unit_roundoff(dt);
    for (auto [N, C] : {std::pair{17, 45}, std::pair{130, 768}}) {
      Act16 inp(cpu, gpu, dt, randn(size_t(N) * C, 10, 2.0f)), w(cpu, gpu, dt, randn(size_t(C), 11)),
          b(cpu, gpu, dt, randn(size_t(C), 12)), out(cpu, gpu, dt, randn(size_t(N) * C, 17));
      Pair mean(cpu, gpu, randn(size_t(N), 18)), rstd(cpu, gpu, randn(size_t(N), 19));
      cpu.layernorm_forward(out.c, mean.c, rstd.c, inp.c, w.c, b.c, N, C);
      gpu.layernorm_forward(out.g, mean.g, rstd.g, inp.g, w.g, b.g, N, C);
      out.check("layernorm_forward out", 8 * u, 2 * u);  // norm * w + b: products up to ~3 x 3
      mean.check("16-bit layernorm_forward mean (fp32)");
      rstd.check("16-bit layernorm_forward rstd (fp32)");
      Act16 dout(cpu, gpu, dt, randn(size_t(N) * C, 13)), dinp(cpu, gpu, dt, randn(size_t(N) * C, 14));
      Pair dw(cpu, gpu, randn(size_t(C), 15)), db(cpu, gpu, randn(size_t(C), 16));
      cpu.layernorm_backward(dinp.c, dw.c, db.c, dout.c, inp.c, w.c, mean.c, rstd.c, N, C);
      gpu.layernorm_backward(dinp.g, dw.g, db.g, dout.g, inp.g, w.g, mean.g, rstd.g, N, C);
      // dinp = old + (dout*w - a - norm*b) * rstd: terms of up to ~10 (rstd ~ 0.5, |dout*w| ~ 10).
      dinp.check("layernorm_backward dinp (accumulated)", 16 * u, 2 * u);
      dw.check("16-bit layernorm_backward dw (fp32)");
      db.check("16-bit layernorm_backward db (fp32)");
    }
    const size_t n = 100003;
    Act16 x(cpu, gpu, dt, randn(n, 40, 3.0f)), y(cpu, gpu, dt, randn(n, 41)), out(cpu, gpu, dt, randn(n, 46));
    cpu.gelu_forward(out.c, x.c, n);
    gpu.gelu_forward(out.g, x.g, n);
    out.check("gelu_forward", 1e-5, 2 * u);  // fp32 tanhf noise times |x| <= ~15 where 1 + tanh cancels
    Act16 d(cpu, gpu, dt, randn(n, 42));
    cpu.gelu_backward(d.c, x.c, d.c, n);
    gpu.gelu_backward(d.g, x.g, d.g, n);
    // g' = 0.5 (1 + th) + 0.5 x (1 - th^2) k (1 + 3 c x^2) cancels for x in about [-6, -4], where
    // th = tanh(k (x + c x^3)) is within a few fp32 ulps of -1: there both fp32 results are
    // noise of |dg'/dth| (up to ~25) times the tanh error (ulp(1) = 6e-8 each) times |dout|
    // (up to ~4.5). The two tanhs differ most: Eigen's (CPU) returns exactly -1 from
    // k (x + c x^3) < -7.9 on, where CUDA's tanhf and the exact value are still -1 + 2e-7. Seen
    // on an H100: x = -4.875, dout = 3.48: exact -1.18e-5, CPU 0, so 1e-5 failed on 2 of 100003
    // elements. 1e-4 absolute, the fp32 test's floor (kTol), bounds that noise (~3e-5).
    d.check("gelu_backward (in place)", 1e-4, 2 * u);
    cpu.residual_forward(out.c, x.c, y.c, n);
    gpu.residual_forward(out.g, x.g, y.g, n);
    out.check("residual_forward", 4 * u, 2 * u);  // a + b of a few units cancelling
  }
}

TEST_CASE("CUDA 16-bit: matmul through cuBLASLt (16-bit A/B, fp32 compute, fp32 dW)") {
  Backend &cpu = *g_cpu, &gpu = *g_gpu;
  for (DType dt : k16BitTypes) {
    const double u = unit_roundoff(dt);
    for (auto [N, C, OC] : {std::tuple{19, 33, 47}, std::tuple{128, 96, 288}, std::tuple{5, 1, 3}}) {
      for (size_t mis : {size_t(0), size_t(1)}) {  // 256-byte and 2-byte aligned views
        for (bool with_bias : {true, false}) {
          Act16 inp(cpu, gpu, dt, randn(size_t(N) * C, 20), mis), w(cpu, gpu, dt, randn(size_t(OC) * C, 21, 0.1f), mis),
              bias(cpu, gpu, dt, randn(size_t(OC), 22), mis), out(cpu, gpu, dt, randn(size_t(N) * OC, 26), mis);
          cpu.matmul_forward(out.c, inp.c, w.c, with_bias ? bias.c : nullptr, N, C, OC);
          gpu.matmul_forward(out.g, inp.g, w.g, with_bias ? TypedPtr(bias.g) : TypedPtr(), N, C, OC);
          // The same 16-bit products, summed in fp32 (K = C <= 96 terms of ~0.1: fp32 noise
          // ~1e-6), rounded once; atol for sums that cancel to near zero: u * the sum's scale
          // sqrt(K) * 0.1 + |bias| ~ 2.
          out.check("matmul_forward", 2 * u, 2 * u);
          Act16 dout(cpu, gpu, dt, randn(size_t(N) * OC, 23), mis), dinp(cpu, gpu, dt, randn(size_t(N) * C, 27), mis);
          Pair dw(cpu, gpu, randn(size_t(OC) * C, 24), mis), dbias(cpu, gpu, randn(size_t(OC), 25), mis);
          cpu.matmul_backward(dinp.c, dw.c, with_bias ? dbias.c : nullptr, dout.c, inp.c, w.c, N, C, OC);
          gpu.matmul_backward(dinp.g, dw.g, with_bias ? dbias.g : nullptr, dout.g, inp.g, w.g, N, C, OC);
          dinp.check("matmul_backward dinp", 2 * u, 2 * u);  // K = OC terms of ~0.1: scale sqrt(288) * 0.1
          // dW (fp32, accumulated onto N(0,1)): sums of N <= 128 exact 16-bit products in fp32;
          // tensor cores may round their fp32 adder tree differently from IEEE order: 1e-4
          // relative to the sum's scale sqrt(N) ~ 11, so 2e-3 absolute.
          std::vector<float> gw(dw.n), cw(dw.n);
          gpu.download(gw.data(), dw.g, dw.n);
          cpu.download(cw.data(), dw.c, dw.n);
          expect_close(std::string(dtype_name(dt)) + " matmul_backward dw (fp32, accumulated)", gw.data(), cw.data(),
                       dw.n, 2e-3, kTol);
          dbias.check("16-bit matmul_backward dbias (fp32, accumulated)");
        }
      }
    }
  }
}

TEST_CASE("CUDA 16-bit: fused causal attention") {
  Backend &cpu = *g_cpu, &gpu = *g_gpu;
  for (DType dt : k16BitTypes) {
    const double u = unit_roundoff(dt);
    for (auto [B, T, C, NH] : {std::tuple{2, 13, 48, 3}, std::tuple{1, 65, 128, 2}, std::tuple{2, 17, 120, 3},
                               std::tuple{1, 5, 256, 1}}) {
      const double hs = double(C) / NH;
      Act16 qkv(cpu, gpu, dt, randn(size_t(B) * T * 3 * C, 30, 0.5f)), out(cpu, gpu, dt, randn(size_t(B) * T * C, 33));
      float* saved_c = static_cast<float*>(cpu.alloc_bytes(cpu.attention_saved_bytes(B, T, NH, DType::f32)));
      void* saved_g = gpu.alloc_bytes(gpu.attention_saved_bytes(B, T, NH, dt));
      cpu.attention_forward(out.c, saved_c, qkv.c, B, T, C, NH);
      gpu.attention_forward(out.g, saved_g, qkv.g, B, T, C, NH);
      // A convex combination of v (|v| of ~0.5-2) in fp32, rounded once.
      out.check("attention_forward", 2 * u, 2 * u);
      Act16 dout(cpu, gpu, dt, randn(size_t(B) * T * C, 31)), dqkv(cpu, gpu, dt, randn(size_t(B) * T * 3 * C, 32));
      cpu.attention_backward(dqkv.c, dout.c, qkv.c, out.c, saved_c, B, T, C, NH);
      gpu.attention_backward(dqkv.g, dout.g, qkv.g, out.g, saved_g, B, T, C, NH);
      // D = dO . O over hs terms reads the 16-bit O: an error of ~u * sqrt(hs) (random signs)
      // carried into every dS of the row, hence into dq, dk and dv.
      dqkv.check("attention_backward dqkv", 4 * u * std::sqrt(hs), 4 * u);
      cpu.release(saved_c);
      gpu.release(saved_g);
    }
  }
}

TEST_CASE("CUDA 16-bit: softmax cross-entropy, whole and vocab-parallel") {
  Backend &cpu = *g_cpu, &gpu = *g_gpu;
  for (DType dt : k16BitTypes) {
    const double u = unit_roundoff(dt);
    const int N = 9, V = 101, Vp = 128;
    std::vector<int32_t> tgt(N);
    for (int i = 0; i < N; ++i) tgt[size_t(i)] = (i * 37 + 5) % V;
    IntPair targets(cpu, gpu, tgt);
    // Losses in fp32 from the same logits: fp32 exp/log noise only. dlogits = dloss * (p - onehot),
    // rounded once: |dloss| * 1e-6 absolute for fp32 noise on the smallest probabilities.
    Act16 logits(cpu, gpu, dt, randn(size_t(N) * Vp, 50, 4.0f));
    Pair losses(cpu, gpu, std::vector<float>(N));
    cpu.softmax_crossentropy(losses.c, logits.c, targets.c, N, V, Vp, 0.25f, true);
    gpu.softmax_crossentropy(losses.g, logits.g, targets.g, N, V, Vp, 0.25f, true);
    losses.check("16-bit softmax_crossentropy losses (fp32)");
    logits.check("softmax_crossentropy dlogits (padding zero)", 1e-6, 2 * u);
    const int Vl = 64, start = 64, v_real = V - start;
    Act16 local(cpu, gpu, dt, randn(size_t(N) * Vl, 51, 4.0f));
    Pair maxes(cpu, gpu, std::vector<float>(N)), partials(cpu, gpu, std::vector<float>(2 * N)),
        l2(cpu, gpu, std::vector<float>(N));
    cpu.crossentropy_max(maxes.c, local.c, N, Vl, v_real);
    gpu.crossentropy_max(maxes.g, local.g, N, Vl, v_real);
    maxes.check("16-bit crossentropy_max (fp32, exact)", 0.0f);
    cpu.crossentropy_partials(partials.c, local.c, maxes.c, targets.c, N, Vl, v_real, start);
    gpu.crossentropy_partials(partials.g, local.g, maxes.g, targets.g, N, Vl, v_real, start);
    partials.check("16-bit crossentropy_partials (fp32)");
    cpu.crossentropy_finish(l2.c, local.c, maxes.c, partials.c, targets.c, N, Vl, v_real, start, 0.5f, true);
    gpu.crossentropy_finish(l2.g, local.g, maxes.g, partials.g, targets.g, N, Vl, v_real, start, 0.5f, true);
    l2.check("16-bit crossentropy_finish losses (fp32)");
    local.check("crossentropy_finish dlogits", 1e-6, 2 * u);
  }
}

TEST_CASE("CUDA KV-cache attention: a prompt, then single tokens, against the CPU") {
  Backend &cpu = *g_cpu, &gpu = *g_gpu;
  // Head sizes 16, 64 and 40; a cache longer than a block of threads (Tmax 300); a context whose
  // scores need more than the default 48 KiB of shared memory (Tmax 13000: 52 KB).
  for (auto [B, C, NH, Tmax] : {std::tuple{2, 48, 3, 20}, std::tuple{1, 128, 2, 300}, std::tuple{3, 120, 3, 9},
                                std::tuple{1, 64, 1, 13000}}) {
    Pair kc(cpu, gpu, std::vector<float>(size_t(B) * Tmax * C)), vc(cpu, gpu, std::vector<float>(size_t(B) * Tmax * C));
    int pos = 0;
    for (int Tq : {Tmax / 2, 1, 1, Tmax - Tmax / 2 - 2}) {
      Pair qkv(cpu, gpu, randn(size_t(B) * Tq * 3 * C, 60 + uint64_t(pos))), out(cpu, gpu, randn(size_t(B) * Tq * C, 61));
      cpu.attention_cached(out.c, kc.c, vc.c, qkv.c, B, Tq, pos, Tmax, C, NH);
      gpu.attention_cached(out.g, kc.g, vc.g, qkv.g, B, Tq, pos, Tmax, C, NH);
      out.check("attention_cached out");
      kc.check("attention_cached key cache", 0.0f);
      vc.check("attention_cached value cache", 0.0f);
      pos += Tq;
    }
  }
}

TEST_CASE("CUDA LoRA support: axpy, and matmul/layernorm backward with frozen (null) weight gradients") {
  Backend &cpu = *g_cpu, &gpu = *g_gpu;
  const size_t n = 1000;
  Pair y(cpu, gpu, randn(n, 70)), x(cpu, gpu, randn(n, 71));
  cpu.axpy(y.c, x.c, 0.375f, n);
  gpu.axpy(y.g, x.g, 0.375f, n);
  y.check("axpy");
  const int N = 33, C = 40, OC = 24;
  Pair inp(cpu, gpu, randn(size_t(N) * C, 72)), w(cpu, gpu, randn(size_t(OC) * C, 73)),
      dout(cpu, gpu, randn(size_t(N) * OC, 74)), dinp(cpu, gpu, randn(size_t(N) * C, 75));
  cpu.matmul_backward(dinp.c, nullptr, nullptr, dout.c, inp.c, w.c, N, C, OC);
  gpu.matmul_backward(dinp.g, nullptr, nullptr, dout.g, inp.g, w.g, N, C, OC);
  dinp.check("matmul_backward dinp, no dw");
  Pair lw(cpu, gpu, randn(size_t(C), 76)), mean(cpu, gpu, randn(size_t(N), 77)), rstd(cpu, gpu, std::vector<float>(N, 1.5f)),
      ldout(cpu, gpu, randn(size_t(N) * C, 78)), ldinp(cpu, gpu, randn(size_t(N) * C, 79));
  cpu.layernorm_backward(ldinp.c, nullptr, nullptr, ldout.c, inp.c, lw.c, mean.c, rstd.c, N, C);
  gpu.layernorm_backward(ldinp.g, nullptr, nullptr, ldout.g, inp.g, lw.g, mean.g, rstd.g, N, C);
  ldinp.check("layernorm_backward dinp, no dw/db");
}

TEST_CASE("CUDA dequantize (int8, NF4) into fp32, bf16 and fp16: bit for bit the CPU's") {
  // One fp32 product per element on both backends (same NF4 table, kernels/quantize.hpp), rounded
  // once: no tolerance. n ends inside a block and is odd (the last NF4 byte half used); the
  // codes sit at an odd device address; outliers and an all-zero block; outputs start random
  // and what lies past n must stay as it was.
  Backend &cpu = *g_cpu, &gpu = *g_gpu;
  const int block = 64;
  const size_t nq = size_t(block) * 517, n = nq - 37;
  std::vector<float> w = randn(nq, 70);
  for (size_t b = 0; b < nq / size_t(block); ++b) {
    float* x = w.data() + b * size_t(block);
    if (b % 31 == 4)
      for (int i = 0; i < block; ++i) x[i] *= 300.0f;
    if (b % 41 == 9) x[b % size_t(block)] = 25.0f;
    if (b == 100) std::fill_n(x, block, 0.0f);
  }
  for (QuantKind kind : {QuantKind::Int8, QuantKind::NF4}) {
    std::vector<uint8_t> codes(quantized_bytes(kind, nq));
    std::vector<float> scales(nq / size_t(block));
    quantize_blockwise(kind, w.data(), nq, block, codes.data(), scales.data());
    uint8_t* gcodes_base = static_cast<uint8_t*>(gpu.alloc_bytes(codes.size() + 1));
    uint8_t* gcodes = gcodes_base + 1;
    gpu.copy_from_host(gcodes, codes.data(), codes.size());
    float* gscales = gpu.alloc(scales.size());
    gpu.upload(gscales, scales.data(), scales.size());
    const std::string what = std::string("dequantize ") + quant_kind_name(kind);

    Pair out(cpu, gpu, randn(nq, 71), 1);  // a 4-byte aligned device view
    cpu.dequantize(out.c, codes.data(), scales.data(), n, block, int(kind));
    gpu.dequantize(out.g, gcodes, gscales, n, block, int(kind));
    out.check((what + " fp32").c_str(), 0.0f);

    for (DType dt : k16BitTypes) {
      Act16 o16(cpu, gpu, dt, randn(nq, 72), 1);  // a 2-byte aligned device view
      gpu.dequantize(o16.g, gcodes, gscales, n, block, int(kind));
      const std::vector<float> got = o16.device(what + " " + dtype_name(dt));
      const TypedPtr ref16 = cpu.alloc(dt, nq);
      cpu.dequantize(ref16, codes.data(), scales.data(), n, block, int(kind));
      std::vector<uint16_t> ref_bits(nq);
      cpu.copy_to_host(ref_bits.data(), ref16.data, nq * 2);
      std::vector<float> before(nq);
      cpu.download(before.data(), o16.c, nq);  // the initial values, rounded to dt
      size_t bad = 0, moved = 0;
      for (size_t i = 0; i < n; ++i) bad += to_bits(dt, got[i]) != ref_bits[i] || !std::isfinite(got[i]);
      for (size_t i = n; i < nq; ++i) moved += got[i] != before[i];
      INFO(what << " " << dtype_name(dt) << ": " << bad << " of " << n << " differ from the CPU's bits, " << moved
                << " written past n");
      CHECK(bad == 0);
      CHECK(moved == 0);
      cpu.release(ref16.data);
    }
    CHECK_THROWS_AS(gpu.dequantize(out.g, gcodes, gscales, n, block, 2), std::invalid_argument);
    CHECK_THROWS_AS(gpu.dequantize(out.g, gcodes, gscales, n, 0, int(kind)), std::invalid_argument);
    gpu.release(gscales);
    gpu.release(gcodes_base);
  }
}

TEST_CASE("CUDA dropout keeps the CPU's elements (counter-based mask), in place and on a column slice") {
  Backend &cpu = *g_cpu, &gpu = *g_gpu;
  for (auto [rows, cols, offset, ld] : {std::tuple{33, 40, 0, 40}, std::tuple{17, 24, 24, 48}, std::tuple{1, 1000, 7, 2000}}) {
    Pair x(cpu, gpu, randn(size_t(rows) * cols, 80)), y(cpu, gpu, randn(size_t(rows) * cols, 81));
    cpu.dropout(y.c, x.c, 0.3f, 99, rows, cols, offset, ld);
    gpu.dropout(y.g, x.g, 0.3f, 99, rows, cols, offset, ld);
    y.check("dropout", 0.0f);
    cpu.dropout(x.c, x.c, 0.1f, 5, rows, cols, offset, ld);
    gpu.dropout(x.g, x.g, 0.1f, 5, rows, cols, offset, ld);
    x.check("dropout in place", 0.0f);
  }
}

int main(int argc, char** argv) {
  const cuda::DeviceProbe probe = cuda::probe_devices();
  if (probe.count == 0) {
    std::printf("SKIPPED: no usable CUDA device (%s): the CUDA ops were compiled but not run\n", probe.reason.c_str());
    return 77;
  }
  g_cpu = make_cpu_backend();
  g_gpu = make_cuda_backend(0);
  const int rc = Catch::Session().run(argc, argv);
  g_gpu.reset();
  g_cpu.reset();
  return rc;
}
