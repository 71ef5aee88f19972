// Every op of the CUDA backend against the CPU reference backend on the same inputs, on odd
// shapes (sizes that are not multiples of a warp, a block or a tile). Outputs sit between guard
// regions that must come back untouched (out-of-bounds writes), and every output is checked
// for NaN/Inf. Needs only the CUDA toolkit, Eigen and Catch2. Without a usable device the whole
// binary reports itself skipped (exit 77, CTest's SKIP_RETURN_CODE). This file: the fp32 ops and
// main; test_cuda_ops_16bit.cpp the bf16/fp16 ops; test_cuda_ops_finetune.cpp the ops of
// generation and fine-tuning (KV cache, LoRA, dequantize, dropout); cuda_ops_pairs.hpp the helpers.
//
// Tolerance: both backends compute in fp32 but sum in different orders (blocked/tree reductions
// on the GPU, Eigen/OpenBLAS blocking on the CPU). For a sum of K terms the difference is bounded
// by ~K * eps * sum|terms| in the worst case and ~sqrt(K) * eps typically; with K <= ~1000 and
// eps = 6e-8 that is < 1e-4 relative to the magnitude of the terms, which is the bound used
// (kTol, relative to max(1, |reference|)). Exponentials (softmax, attention) add a few ulps.
#define CATCH_CONFIG_RUNNER
#include <catch2/catch.hpp>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <new>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "kernels/backend.hpp"
#include "kernels/cuda/cuda_backend.hpp"
#include "kernels/cuda/cuda_probe.hpp"
#include "tests/unit/cuda_ops_pairs.hpp"
#include "tests/unit/normal_samples.hpp"

using namespace loom;
using namespace loom::cuda_test;

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

// Both kernel sets of the backward (cuda::LayerNormBackwardKernels): `vector` takes 16-byte
// accesses where C is a multiple of 4 floats and every view is 16-byte aligned (checked through
// its call counter), one element at a time otherwise (C 45, views misaligned by one float); N
// 2100 gives its dw/db kernel more rows than one pass of its 128 row groups of 8 warps covers.
TEST_CASE("CUDA layernorm forward/backward") {
  Backend &cpu = *g_cpu, &gpu = *g_gpu;
  using cuda::LayerNormBackwardKernels;
  const LayerNormBackwardKernelsRestored restore;
  for (LayerNormBackwardKernels kernels : {LayerNormBackwardKernels::rows, LayerNormBackwardKernels::vector}) {
   cuda::set_layernorm_backward_kernels(kernels);
   const bool vector = kernels == LayerNormBackwardKernels::vector;
   for (auto [N, C, mis] : {std::tuple{17, 45, 0}, std::tuple{130, 768, 0}, std::tuple{130, 768, 1},
                            std::tuple{2100, 96, 0}}) {
    INFO((vector ? "vector" : "rows") << " kernels, N " << N << ", C " << C << ", views misaligned by " << mis);
    Pair inp(cpu, gpu, randn(size_t(N) * C, 10, 2.0f), mis), w(cpu, gpu, randn(size_t(C), 11), mis),
        b(cpu, gpu, randn(size_t(C), 12), mis);
    // Outputs start as random values: an op that accumulated instead of overwriting would show.
    Pair out(cpu, gpu, randn(size_t(N) * C, 17), mis), mean(cpu, gpu, randn(size_t(N), 18)),
        rstd(cpu, gpu, randn(size_t(N), 19));
    cpu.layernorm_forward(out.c, mean.c, rstd.c, inp.c, w.c, b.c, N, C);
    gpu.layernorm_forward(out.g, mean.g, rstd.g, inp.g, w.g, b.g, N, C);
    out.check("layernorm_forward out");
    mean.check("layernorm_forward mean");
    rstd.check("layernorm_forward rstd");
    for (bool with_dw : {true, false}) {  // false: a frozen LayerNorm, the input gradient alone
      Pair dout(cpu, gpu, randn(size_t(N) * C, 13), mis), dinp(cpu, gpu, randn(size_t(N) * C, 14), mis);
      Pair dw(cpu, gpu, randn(size_t(C), 15)), db(cpu, gpu, randn(size_t(C), 16));
      const size_t vector_calls0 = cuda::layernorm_backward_vector_calls();
      cpu.layernorm_backward(dinp.c, with_dw ? dw.c : nullptr, with_dw ? db.c : nullptr, dout.c, inp.c, w.c, mean.c,
                             rstd.c, N, C);
      gpu.layernorm_backward(dinp.g, with_dw ? dw.g : nullptr, with_dw ? db.g : nullptr, dout.g, inp.g, w.g, mean.g,
                             rstd.g, N, C);
      CHECK(cuda::layernorm_backward_vector_calls() - vector_calls0 == (vector && C % 4 == 0 && mis == 0 ? 1u : 0u));
      dinp.check("layernorm_backward dinp (accumulated)");
      dw.check(with_dw ? "layernorm_backward dw" : "layernorm_backward without dw: dw untouched");
      db.check(with_dw ? "layernorm_backward db" : "layernorm_backward without db: db untouched");
    }
   }
  }
}

// The `vector` kernels take 16-byte accesses only when all four views are 16-byte aligned: one
// view misaligned by 4 or 8 bytes (a weight view into the flat parameter buffer, with aligned
// activations) must take the one-element kernels and still be right. And the smallest shapes:
// N 0 and 1, C of one vector (4 floats).
TEST_CASE("CUDA layernorm vector backward with one view misaligned, and tiny shapes") {
  Backend &cpu = *g_cpu, &gpu = *g_gpu;
  const LayerNormBackwardKernelsRestored restore;
  cuda::set_layernorm_backward_kernels(cuda::LayerNormBackwardKernels::vector);
  for (auto [N, C, which, mis] : {std::tuple{130, 768, -1, 0}, std::tuple{130, 768, 0, 1}, std::tuple{130, 768, 1, 2},
                                  std::tuple{130, 768, 2, 1}, std::tuple{130, 768, 3, 2}, std::tuple{0, 768, -1, 0},
                                  std::tuple{1, 768, -1, 0}, std::tuple{37, 4, -1, 0}, std::tuple{37, 4, 3, 1}}) {
    INFO("N " << N << ", C " << C << ", view " << which << " (dinp, dout, inp, w) misaligned by " << mis);
    auto m = [&, which = which, mis = mis](int view) { return view == which ? size_t(mis) : size_t(0); };
    Pair inp(cpu, gpu, randn(size_t(N) * C, 10, 2.0f), m(2)), w(cpu, gpu, randn(size_t(C), 11), m(3)),
        b(cpu, gpu, randn(size_t(C), 12));
    Pair out(cpu, gpu, randn(size_t(N) * C, 17)), mean(cpu, gpu, randn(size_t(N), 18)), rstd(cpu, gpu, randn(size_t(N), 19));
    cpu.layernorm_forward(out.c, mean.c, rstd.c, inp.c, w.c, b.c, N, C);
    gpu.layernorm_forward(out.g, mean.g, rstd.g, inp.g, w.g, b.g, N, C);
    Pair dout(cpu, gpu, randn(size_t(N) * C, 13), m(1)), dinp(cpu, gpu, randn(size_t(N) * C, 14), m(0));
    Pair dw(cpu, gpu, randn(size_t(C), 15)), db(cpu, gpu, randn(size_t(C), 16));
    const size_t vector_calls0 = cuda::layernorm_backward_vector_calls();
    cpu.layernorm_backward(dinp.c, dw.c, db.c, dout.c, inp.c, w.c, mean.c, rstd.c, N, C);
    gpu.layernorm_backward(dinp.g, dw.g, db.g, dout.g, inp.g, w.g, mean.g, rstd.g, N, C);
    CHECK(cuda::layernorm_backward_vector_calls() - vector_calls0 == (which < 0 && N > 0 ? 1u : 0u));
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

// fp32 runs never take the GELU epilogues: the two ops run one after the other, as on the CPU.
TEST_CASE("CUDA matmul + GELU pairs in fp32 equal the two ops") {
  Backend &cpu = *g_cpu, &gpu = *g_gpu;
  const int N = 64, C = 96, OC = 256;
  for (bool with_bias : {true, false}) {
    Pair inp(cpu, gpu, randn(size_t(N) * C, 30)), w(cpu, gpu, randn(size_t(OC) * C, 31, 0.1f)),
        bias(cpu, gpu, randn(size_t(OC), 32)), out(cpu, gpu, randn(size_t(N) * OC, 33)),
        pre(cpu, gpu, randn(size_t(N) * OC, 34));
    const size_t fused0 = cuda::gelu_epilogue_matmuls();
    cpu.matmul_gelu_forward(out.c, pre.c, inp.c, w.c, with_bias ? bias.c : nullptr, N, C, OC);
    gpu.matmul_gelu_forward(out.g, pre.g, inp.g, w.g, with_bias ? bias.g : nullptr, N, C, OC);
    pre.check("matmul_gelu_forward pre");
    out.check("matmul_gelu_forward out");
    // The next layer's backward through the GELU: dinp (N, OC) from dout (N, C) and w2 (C, OC).
    Pair dout(cpu, gpu, randn(size_t(N) * C, 35)), w2(cpu, gpu, randn(size_t(C) * OC, 36, 0.1f)),
        dinp(cpu, gpu, randn(size_t(N) * OC, 37)), dw(cpu, gpu, randn(size_t(C) * OC, 38)),
        dbias(cpu, gpu, randn(size_t(C), 39));
    cpu.matmul_backward_gelu(dinp.c, dw.c, with_bias ? dbias.c : nullptr, dout.c, out.c, w2.c, pre.c, N, OC, C);
    gpu.matmul_backward_gelu(dinp.g, dw.g, with_bias ? dbias.g : nullptr, dout.g, out.g, w2.g, pre.g, N, OC, C);
    dinp.check("matmul_backward_gelu dinp");
    dw.check("matmul_backward_gelu dw (accumulated)");
    dbias.check("matmul_backward_gelu dbias (accumulated)");
    CHECK(cuda::gelu_epilogue_matmuls() == fused0);  // no epilogue in fp32, aligned as it all is
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
  // Rows read 16 bytes at a time (aligned, Vp a multiple of 4 floats; 3008 columns: several
  // accesses per thread) and one by one (Vp 130, or a view 4 bytes off 16).
  for (const auto& [v, vp, misalign] : {std::tuple<int, int, size_t>{V, Vp, 0}, {V, 130, 0}, {V, Vp, 1},
                                        {3001, 3008, 0}, {3001, 3008, 3}}) {
    INFO("V " << v << ", Vp " << vp << ", misaligned by " << misalign << " floats");
    // Row 0's target is the last real column (past the whole 16-byte accesses when V is not a
    // multiple of 4); row 1 has -inf logits in its first half (masked columns: whole accesses
    // and whole threads with nothing but -inf), its target past them.
    std::vector<int32_t> t(tgt);
    t[0] = v - 1;
    t[1] = v / 2 + 1;
    IntPair tcase(cpu, gpu, t);
    std::vector<float> init = randn(size_t(N) * vp, 50, 4.0f);
    for (int j = 0; j < v / 2; ++j) init[size_t(vp) + size_t(j)] = -INFINITY;
    Pair logits(cpu, gpu, init, misalign), losses(cpu, gpu, std::vector<float>(N));
    cpu.softmax_crossentropy(losses.c, logits.c, tcase.c, N, v, vp, 0.25f, true);
    gpu.softmax_crossentropy(losses.g, logits.g, tcase.g, N, v, vp, 0.25f, true);
    losses.check("softmax_crossentropy losses");
    logits.check("softmax_crossentropy dlogits (padding zero)");
  }
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
  // Sizes around the float4 path's tail, and views only 4 or 8 bytes aligned (the scalar path).
  for (const auto& [n, misalign] : {std::pair<size_t, size_t>{1, 0}, {7, 0}, {1000, 0}, {3000017, 0}, {3000017, 1},
                                    {1000003, 2}, {5, 3}}) {
    INFO("n " << n << ", misaligned by " << misalign << " floats");
    Pair x(cpu, gpu, randn(n, 60), misalign);
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

TEST_CASE("CUDA backend out of memory is a std::bad_alloc naming the size and the free memory") {
  // 1 PiB: more than any device has. The trainer reports such an exception with the plan's
  // figures (engine/train/memory_check.hpp); the error is not sticky, so the backend goes on.
  std::string what;
  try {
    g_gpu->alloc_bytes(size_t(1) << 50);
  } catch (const std::bad_alloc& e) {
    what = e.what();
  }
  INFO(what);
  CHECK(what.rfind("GPU out of memory: cudaMalloc of 1073741824.0 MB failed at ", 0) == 0);
  CHECK(what.find(" MB free of ") != std::string::npos);
  Pair p(*g_cpu, *g_gpu, randn(1000, 80));
  g_gpu->scale(p.g, 1000, 2.0f);
  g_cpu->scale(p.c, 1000, 2.0f);
  p.check("scale after a refused allocation");
}

TEST_CASE("CUDA backend device identity: the UUID as nvidia-smi writes it, the PCI bus id") {
  // engine/train/one_rank_per_gpu.hpp compares ranks' UUIDs: it must be well-formed and stable.
  const std::string uuid = g_gpu->device_uuid();
  INFO("uuid " << uuid);
  REQUIRE(uuid.size() == 40);  // "GPU-" and 8-4-4-4-12 hex digits
  CHECK(uuid.rfind("GPU-", 0) == 0);
  for (size_t i = 4; i < uuid.size(); ++i) {
    const bool dash = i == 12 || i == 17 || i == 22 || i == 27;
    CHECK((dash ? uuid[i] == '-' : std::isxdigit(static_cast<unsigned char>(uuid[i])) != 0));
  }
  CHECK(uuid != "GPU-00000000-0000-0000-0000-000000000000");
  CHECK(g_gpu->device_uuid() == uuid);
  CHECK(!g_gpu->device_pci_bus_id().empty());
  CHECK(g_cpu->device_uuid().empty());
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
