// The CUDA ops of generation and fine-tuning against the CPU reference (part of the
// test_cuda_ops binary; test_cuda_ops.cpp has main): KV-cache attention, LoRA's axpy and null
// weight gradients, QLoRA's dequantization, LoRA dropout.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cstdint>
#include <tuple>
#include <vector>

#include "kernels/quantize.hpp"
#include "kernels/backend.hpp"
#include "tests/unit/cuda_ops_pairs.hpp"
#include "tests/unit/normal_samples.hpp"

using namespace loom;
using namespace loom::cuda_test;

TEST_CASE("CUDA KV-cache attention: a prompt, then single tokens, against the CPU") {
  Backend &cpu = *g_cpu, &gpu = *g_gpu;
  // Head sizes 16, 64 and 40; a cache longer than a block of threads (Tmax 300).
  for (auto [B, C, NH, Tmax] : {std::tuple{2, 48, 3, 20}, std::tuple{1, 128, 2, 300}, std::tuple{3, 120, 3, 9}}) {
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

TEST_CASE("CUDA KV-cache attention past 12K cached tokens (more than 48 KiB of scores per block)") {
  // A cache already holding 13000 positions (random keys and values, the same on both backends),
  // then two single tokens: each block keeps pos + 1 scores, 52 KB, above the default dynamic
  // shared memory, so the launch must ask for more. Cheap on purpose (two queries), so that the
  // sanitizers in scripts/gpu_check.sh run it too.
  Backend &cpu = *g_cpu, &gpu = *g_gpu;
  const int B = 1, C = 64, NH = 1, Tmax = 13002;
  Pair kc(cpu, gpu, randn(size_t(B) * Tmax * C, 62)), vc(cpu, gpu, randn(size_t(B) * Tmax * C, 63));
  for (int pos : {Tmax - 2, Tmax - 1}) {
    Pair qkv(cpu, gpu, randn(size_t(B) * 3 * C, 64 + uint64_t(pos))), out(cpu, gpu, randn(size_t(B) * C, 65));
    cpu.attention_cached(out.c, kc.c, vc.c, qkv.c, B, 1, pos, Tmax, C, NH);
    gpu.attention_cached(out.g, kc.g, vc.g, qkv.g, B, 1, pos, Tmax, C, NH);
    out.check("attention_cached out, long context");
    kc.check("attention_cached key cache, long context", 0.0f);
    vc.check("attention_cached value cache, long context", 0.0f);
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
