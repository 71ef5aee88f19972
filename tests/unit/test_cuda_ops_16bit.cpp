// The CUDA ops in 16-bit compute (bf16, fp16) against the fp32 CPU reference (part of the
// test_cuda_ops binary; test_cuda_ops.cpp has main and the fp32 ops).
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
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <string>
#include <tuple>
#include <vector>

#include "kernels/backend.hpp"
#include "kernels/cuda/cuda_backend.hpp"
#include "tests/unit/cuda_ops_pairs.hpp"
#include "tests/unit/normal_samples.hpp"

using namespace loom;
using namespace loom::cuda_test;

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

// LayerNorm's backward on both kernel sets (cuda::LayerNormBackwardKernels), as in the fp32
// test: `vector` takes 8 elements an access where C is a multiple of 8 and the views are 16-byte
// aligned (C 768 and 264), one at a time otherwise (C 45 and 268, views misaligned by one element
// or four).
TEST_CASE("CUDA 16-bit: layernorm, GELU, residual") {
  Backend &cpu = *g_cpu, &gpu = *g_gpu;
  using cuda::LayerNormBackwardKernels;
  const LayerNormBackwardKernelsRestored restore;
  for (DType dt : k16BitTypes) {
    const double u = unit_roundoff(dt);
    // C 268: a multiple of 4, not of 8; views misaligned by 2 bytes or 8.
    for (auto [N, C, mis] : {std::tuple{17, 45, 0}, std::tuple{130, 768, 0}, std::tuple{130, 768, 1},
                             std::tuple{130, 768, 4}, std::tuple{130, 268, 0}, std::tuple{2100, 264, 0}}) {
      Act16 inp(cpu, gpu, dt, randn(size_t(N) * C, 10, 2.0f), mis), w(cpu, gpu, dt, randn(size_t(C), 11), mis),
          b(cpu, gpu, dt, randn(size_t(C), 12), mis), out(cpu, gpu, dt, randn(size_t(N) * C, 17), mis);
      Pair mean(cpu, gpu, randn(size_t(N), 18)), rstd(cpu, gpu, randn(size_t(N), 19));
      cpu.layernorm_forward(out.c, mean.c, rstd.c, inp.c, w.c, b.c, N, C);
      gpu.layernorm_forward(out.g, mean.g, rstd.g, inp.g, w.g, b.g, N, C);
      out.check("layernorm_forward out", 8 * u, 2 * u);  // norm * w + b: products up to ~3 x 3
      mean.check("16-bit layernorm_forward mean (fp32)");
      rstd.check("16-bit layernorm_forward rstd (fp32)");
      for (LayerNormBackwardKernels kernels : {LayerNormBackwardKernels::rows, LayerNormBackwardKernels::vector}) {
        cuda::set_layernorm_backward_kernels(kernels);
        const bool vector = kernels == LayerNormBackwardKernels::vector;
        INFO((vector ? "vector" : "rows") << " kernels, N " << N << ", C " << C << ", views misaligned by " << mis);
        Act16 dout(cpu, gpu, dt, randn(size_t(N) * C, 13), mis), dinp(cpu, gpu, dt, randn(size_t(N) * C, 14), mis);
        Pair dw(cpu, gpu, randn(size_t(C), 15)), db(cpu, gpu, randn(size_t(C), 16));
        const size_t vector_calls0 = cuda::layernorm_backward_vector_calls();
        cpu.layernorm_backward(dinp.c, dw.c, db.c, dout.c, inp.c, w.c, mean.c, rstd.c, N, C);
        gpu.layernorm_backward(dinp.g, dw.g, db.g, dout.g, inp.g, w.g, mean.g, rstd.g, N, C);
        CHECK(cuda::layernorm_backward_vector_calls() - vector_calls0 == (vector && C % 8 == 0 && mis == 0 ? 1u : 0u));
        // dinp = old + (dout*w - a - norm*b) * rstd: terms of up to ~10 (rstd ~ 0.5, |dout*w| ~ 10).
        dinp.check("layernorm_backward dinp (accumulated)", 16 * u, 2 * u);
        dw.check("16-bit layernorm_backward dw (fp32)");
        db.check("16-bit layernorm_backward db (fp32)");
      }
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

// The MLP's linear layer + GELU through cuBLASLt's GELU_AUX[_BIAS] and DGELU epilogues and
// through the two-op fallback. The reference is the CPU's two ops in fp32 on the same 16-bit
// inputs. Which path ran is checked too (gelu_epilogue_matmuls): the epilogue exactly when the
// width is a multiple of 8 and every tensor it touches (out, pre, bias; dinp, pre) is 16-byte
// aligned, whatever N is; otherwise the two ops.
TEST_CASE("CUDA 16-bit: matmul + GELU pairs, fused through cuBLASLt epilogues and not") {
  Backend &cpu = *g_cpu, &gpu = *g_gpu;
  struct Case {
    int N, C, OC;
    size_t mis, mis_bias, mis_pre;  // 16-bit elements: 1 makes a view only 2-byte aligned
  };
  const Case cases[] = {
      {64, 96, 256, 0, 0, 0},  // fused
      {19, 96, 256, 0, 0, 0},  // fused: N needs no alignment
      {19, 33, 44, 0, 0, 0},   // width 44: the two ops
      {64, 96, 256, 1, 1, 1},  // every view misaligned: the two ops
      {64, 96, 256, 0, 1, 0},  // the bias alone misaligned: forward unfused, backward fused
      {64, 96, 256, 0, 0, 1},  // the pre-activation alone misaligned: neither fused
  };
  for (DType dt : k16BitTypes) {
    const double u = unit_roundoff(dt);
    for (const Case& k : cases) {
      const int N = k.N, C = k.C, OC = k.OC;
      const size_t mis = k.mis;
      for (bool with_bias : {true, false}) {
        INFO("N " << N << " C " << C << " OC " << OC << ", misaligned: all " << mis << ", bias " << k.mis_bias
                  << ", pre " << k.mis_pre << "; with bias " << with_bias);
        Act16 inp(cpu, gpu, dt, randn(size_t(N) * C, 30), mis), w(cpu, gpu, dt, randn(size_t(OC) * C, 31, 0.1f), mis),
            bias(cpu, gpu, dt, randn(size_t(OC), 32), mis + k.mis_bias),
            out(cpu, gpu, dt, randn(size_t(N) * OC, 33), mis), pre(cpu, gpu, dt, randn(size_t(N) * OC, 34), mis + k.mis_pre);
        const bool width_ok = OC % 8 == 0 && mis == 0 && k.mis_pre == 0;
        const size_t fused0 = cuda::gelu_epilogue_matmuls();
        cpu.matmul_gelu_forward(out.c, pre.c, inp.c, w.c, with_bias ? bias.c : nullptr, N, C, OC);
        gpu.matmul_gelu_forward(out.g, pre.g, inp.g, w.g, with_bias ? TypedPtr(bias.g) : TypedPtr(), N, C, OC);
        const bool fwd_fused = width_ok && (!with_bias || k.mis_bias == 0);
        CHECK(cuda::gelu_epilogue_matmuls() - fused0 == (fwd_fused ? 1u : 0u));
        pre.check("matmul_gelu_forward pre", 2 * u, 2 * u);  // as matmul_forward
        // Fused, gelu is taken of the unrounded pre-activation (|gelu'| <= 1.13) and rounded
        // once; 2e-3 more for a GELU epilogue whose tanh is an approximation (tanh.approx.f32 is
        // within 2^-10.7 absolute: times |x| / 2 <= 2.5). A wiring error (a transposed operand,
        // a lost bias, the wrong aux matrix) is off by O(1). (The allowance would also pass
        // erf's GELU, within ~1e-3 of tanh's.)
        out.check("matmul_gelu_forward out", 3 * u + 2e-3, 2 * u);
        // Backward through the GELU: dinp (N, OC) = (dout @ w2) * gelu'(p2), dout (N, C), w2
        // (C, OC). The layer's input x2 and the pre-activation p2 are fresh 16-bit tensors, the
        // same values on both sides.
        Act16 p2(cpu, gpu, dt, randn(size_t(N) * OC, 40), mis + k.mis_pre),
            x2(cpu, gpu, dt, randn(size_t(N) * OC, 41), mis), dout(cpu, gpu, dt, randn(size_t(N) * C, 35), mis),
            w2(cpu, gpu, dt, randn(size_t(C) * OC, 36, 0.1f), mis), dinp(cpu, gpu, dt, randn(size_t(N) * OC, 37), mis);
        Pair dw(cpu, gpu, randn(size_t(C) * OC, 38), mis), dbias(cpu, gpu, randn(size_t(C), 39), mis);
        const size_t fused1 = cuda::gelu_epilogue_matmuls();
        cpu.matmul_backward_gelu(dinp.c, dw.c, with_bias ? dbias.c : nullptr, dout.c, x2.c, w2.c, p2.c, N, OC, C);
        gpu.matmul_backward_gelu(dinp.g, dw.g, with_bias ? dbias.g : nullptr, dout.g, x2.g, w2.g, p2.g, N, OC, C);
        CHECK(cuda::gelu_epilogue_matmuls() - fused1 == (width_ok ? 1u : 0u));
        // (dout @ w2) sums C <= 96 products of ~0.1 (scale ~1), times gelu' <= 1.13, rounded
        // once (fused) or twice (not); the same 2e-3 for an approximate tanh in gelu'.
        dinp.check("matmul_backward_gelu dinp", 4 * u + 2e-3, 2 * u);
        // dW and dbias as matmul_backward's (its test explains the tolerances).
        std::vector<float> gw(dw.n), cw(dw.n);
        gpu.download(gw.data(), dw.g, dw.n);
        cpu.download(cw.data(), dw.c, dw.n);
        expect_close(std::string(dtype_name(dt)) + " matmul_backward_gelu dw (fp32, accumulated)", gw.data(),
                     cw.data(), dw.n, 2e-3, kTol);
        dbias.check("matmul_backward_gelu dbias (fp32, accumulated)");
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
    // 16-byte accesses (8 values: Vp 128 and 3008, aligned) and one by one (Vp 132: rows not a
    // multiple of 16 bytes; a view 2 bytes off).
    for (const auto& [v, vp, misalign] : {std::tuple<int, int, size_t>{V, Vp, 0}, {V, 132, 0}, {V, Vp, 1},
                                          {3001, 3008, 0}}) {
      INFO("V " << v << ", Vp " << vp << ", misaligned by " << misalign << " elements");
      Act16 logits(cpu, gpu, dt, randn(size_t(N) * vp, 50, 4.0f), misalign);
      Pair losses(cpu, gpu, std::vector<float>(N));
      cpu.softmax_crossentropy(losses.c, logits.c, targets.c, N, v, vp, 0.25f, true);
      gpu.softmax_crossentropy(losses.g, logits.g, targets.g, N, v, vp, 0.25f, true);
      losses.check("16-bit softmax_crossentropy losses (fp32)");
      logits.check("softmax_crossentropy dlogits (padding zero)", 1e-6, 2 * u);
    }
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
