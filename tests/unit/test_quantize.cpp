// Blockwise int8 / NF4 quantization (kernels/quantize.hpp) and the CPU backend's dequantize op
// (kernels/backend_ops.def): the round trip on normal weights with outlier blocks stays within
// half the largest gap between adjacent levels times each block's absmax (bounds computed from
// the level sets, not written down), every code is the nearest level, the byte layout, zero
// blocks, the one rounding of 16-bit outputs, the double instantiation, and bad arguments.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <limits>
#include <stdexcept>
#include <vector>

#include "kernels/backend.hpp"
#include "kernels/cpu/cpu_ops.hpp"
#include "kernels/quantize.hpp"
#include "tests/unit/normal_samples.hpp"

using namespace loom;

namespace {

constexpr double kU32 = 5.9604644775390625e-8;  // fp32 unit roundoff, 2^-24

// Normal weights with outliers: every 37th block scaled by 1000, every 23rd with one element
// of +-40 among N(0, 1) values, every 29th scaled down to 1e-3.
std::vector<float> weights_with_outliers(size_t n, int block, uint64_t seed) {
  std::vector<float> w = randn(n, seed);
  const size_t nb = n / size_t(block);
  for (size_t b = 0; b < nb; ++b) {
    float* x = w.data() + b * size_t(block);
    if (b % 37 == 5)
      for (int i = 0; i < block; ++i) x[i] *= 1000.0f;
    if (b % 23 == 3) x[(b * 7) % size_t(block)] = b % 2 ? 40.0f : -40.0f;
    if (b % 29 == 11)
      for (int i = 0; i < block; ++i) x[i] *= 1e-3f;
  }
  return w;
}

// The levels a code can decode to, before the block's scale: int8 -127..127 (what the
// quantizer writes), NF4 the table.
std::vector<double> levels_of(QuantKind kind) {
  std::vector<double> l;
  if (kind == QuantKind::Int8)
    for (int v = -127; v <= 127; ++v) l.push_back(v);
  else
    for (float v : kNF4Levels) l.push_back(v);
  return l;
}

// Half the largest gap between adjacent levels, in units of the scale the quantizer stores
// (int8: the scale is absmax / 127 and the gap 1; NF4: the scale is absmax).
double half_max_gap(QuantKind kind) {
  const std::vector<double> l = levels_of(kind);
  double g = 0;
  for (size_t i = 1; i < l.size(); ++i) g = std::max(g, l[i] - l[i - 1]);
  return g / 2;
}

// The level code i decodes to (before the scale).
double level_at(QuantKind kind, const std::vector<uint8_t>& codes, size_t i) {
  if (kind == QuantKind::Int8) return double(int8_t(codes[i]));
  return kNF4Levels[(codes[i / 2] >> ((i & 1) * 4)) & 0xf];
}

float block_absmax(const float* x, int block) {
  float m = 0;
  for (int i = 0; i < block; ++i) m = std::max(m, std::fabs(x[i]));
  return m;
}

struct Quantized {
  std::vector<uint8_t> codes;
  std::vector<float> scales;
};
Quantized quantize(QuantKind kind, const std::vector<float>& w, int block) {
  Quantized q;
  q.codes.assign(quantized_bytes(kind, w.size()), 0xAA);
  q.scales.assign(w.size() / size_t(block), -1.0f);
  quantize_blockwise(kind, w.data(), w.size(), block, q.codes.data(), q.scales.data());
  return q;
}

}  // namespace

TEST_CASE("quantized_bytes and the NF4 table") {
  CHECK(quantized_bytes(QuantKind::Int8, 4096) == 4096);
  CHECK(quantized_bytes(QuantKind::NF4, 4096) == 2048);
  CHECK(quantized_bytes(QuantKind::NF4, 0) == 0);
  CHECK_THROWS_AS(quantized_bytes(static_cast<QuantKind>(5), 64), std::invalid_argument);
  CHECK(std::string(quant_kind_name(QuantKind::NF4)) == "nf4");
  CHECK(std::string(quant_kind_name(QuantKind::Int8)) == "int8");
  // Ascending, from -1 to 1, with an exact zero at code kNF4Zero.
  for (int k = 1; k < 16; ++k) CHECK(kNF4Levels[k - 1] < kNF4Levels[k]);
  CHECK(kNF4Levels[0] == -1.0f);
  CHECK(kNF4Levels[15] == 1.0f);
  CHECK(kNF4Levels[kNF4Zero] == 0.0f);
}

TEST_CASE("quantize -> dequantize round trip: every element within half the largest level gap times its absmax") {
  auto cpu = make_cpu_backend();
  const size_t n = size_t(1) << 16;
  for (QuantKind kind : {QuantKind::Int8, QuantKind::NF4}) {
    const std::vector<double> levels = levels_of(kind);
    const double half_gap = half_max_gap(kind);
    for (int block : {64, 128, 2, 254}) {
      const size_t nn = n / size_t(block) * size_t(block);
      const std::vector<float> w = weights_with_outliers(nn, block, 7 + uint64_t(block));
      const Quantized q = quantize(kind, w, block);
      std::vector<float> out(nn, 12345.0f);
      cpu->dequantize(out.data(), q.codes.data(), q.scales.data(), nn, block, int(kind));

      size_t bad_scale = 0, bad_bound = 0, not_nearest = 0;
      double worst_ratio = 0;  // the largest error as a fraction of its bound
      for (size_t b = 0; b < nn / size_t(block); ++b) {
        const float* x = w.data() + b * size_t(block);
        const float absmax = block_absmax(x, block);
        const float want_scale = kind == QuantKind::Int8 ? absmax / 127.0f : absmax;
        bad_scale += q.scales[b] != want_scale;
        const double s = q.scales[b];
        // Exact arithmetic gives |w - level * s| <= half_gap * s; the decoded product is then
        // rounded to fp32 once (at most 2^-24 of |level * s| <= absmax, doubled for slack).
        const double bound = half_gap * s + 2 * kU32 * absmax;
        for (int i = 0; i < block; ++i) {
          const size_t e = b * size_t(block) + size_t(i);
          const double err = std::fabs(double(w[e]) - double(out[e]));
          worst_ratio = std::max(worst_ratio, err / bound);
          bad_bound += err > bound;
          // The code is the nearest level to w / s (ties either way).
          const double t = double(w[e]) / s, got = std::fabs(t - level_at(kind, q.codes, e));
          double best = std::numeric_limits<double>::infinity();
          for (double l : levels) best = std::min(best, std::fabs(t - l));
          not_nearest += got > best + 1e-12;
        }
      }
      INFO(quant_kind_name(kind) << ", block " << block << ": half the largest gap = " << half_gap
                                 << " x scale; worst error / bound = " << worst_ratio);
      CHECK(bad_scale == 0);
      CHECK(bad_bound == 0);
      CHECK(not_nearest == 0);
      // The bound is reached, not loose by orders of magnitude.
      CHECK(worst_ratio > 0.5);
      std::printf("round trip %s block %d: half max gap %.6f x scale, worst error / bound %.4f\n",
                  quant_kind_name(kind), block, half_gap, worst_ratio);
    }
  }
}

TEST_CASE("mean absolute error on N(0,1) weights, block 64 (measured)") {
  auto cpu = make_cpu_backend();
  const size_t n = size_t(1) << 20;
  const int block = 64;
  const std::vector<float> w = randn(n, 2023);
  double mae[2] = {0, 0};
  for (QuantKind kind : {QuantKind::Int8, QuantKind::NF4}) {
    const Quantized q = quantize(kind, w, block);
    std::vector<float> out(n);
    cpu->dequantize(out.data(), q.codes.data(), q.scales.data(), n, block, int(kind));
    double sum_abs = 0, sum_sq = 0, max_abs = 0;
    for (size_t i = 0; i < n; ++i) {
      const double e = std::fabs(double(w[i]) - out[i]);
      sum_abs += e;
      sum_sq += e * e;
      max_abs = std::max(max_abs, e);
    }
    mae[int(kind)] = sum_abs / double(n);
    std::printf("%s, block %d, N(0,1), n = %zu: mean |error| %.6f, rms %.6f, max %.6f (bits per weight %.2f)\n",
                quant_kind_name(kind), block, n, sum_abs / double(n), std::sqrt(sum_sq / double(n)), max_abs,
                8.0 * double(quantized_bytes(kind, n)) / double(n) + 32.0 / block);
  }
  // Sanity, loose: int8 about absmax / 508 (~0.005 for absmax ~2.5), NF4 an order more.
  CHECK(mae[0] < 0.01);
  CHECK(mae[1] < 0.1);
  CHECK(mae[1] > mae[0]);
}

TEST_CASE("zero blocks get scale 0 and decode to zeros, their neighbours are unaffected") {
  auto cpu = make_cpu_backend();
  const int block = 64;
  const size_t n = 8 * size_t(block);
  std::vector<float> w = randn(n, 99);
  for (size_t b : {size_t(0), size_t(3), size_t(7)}) std::fill_n(w.begin() + long(b * block), block, 0.0f);
  for (QuantKind kind : {QuantKind::Int8, QuantKind::NF4}) {
    const Quantized q = quantize(kind, w, block);
    std::vector<float> out(n, 1.0f);
    cpu->dequantize(out.data(), q.codes.data(), q.scales.data(), n, block, int(kind));
    std::vector<bf16> out16(n, bf16(1.0f));
    cpu->dequantize(out16.data(), q.codes.data(), q.scales.data(), n, block, int(kind));
    for (size_t b = 0; b < 8; ++b) {
      const bool zero = b == 0 || b == 3 || b == 7;
      INFO(quant_kind_name(kind) << " block " << b);
      if (zero) {
        CHECK(q.scales[b] == 0.0f);
        size_t nonzero = 0;
        for (int i = 0; i < block; ++i)
          nonzero += out[b * block + size_t(i)] != 0.0f || float(out16[b * block + size_t(i)]) != 0.0f;
        CHECK(nonzero == 0);
        // The code of level 0: int8 0, NF4 nibble kNF4Zero (0x77 per byte).
        const uint8_t want = kind == QuantKind::Int8 ? 0 : uint8_t(kNF4Zero | (kNF4Zero << 4));
        const size_t c0 = kind == QuantKind::Int8 ? b * block : b * block / 2;
        const size_t c1 = kind == QuantKind::Int8 ? c0 + block : c0 + block / 2;
        CHECK(std::count(q.codes.begin() + long(c0), q.codes.begin() + long(c1), want) == long(c1 - c0));
      } else {
        CHECK(q.scales[b] > 0.0f);
        double err = 0;
        for (int i = 0; i < block; ++i) err = std::max(err, double(std::fabs(w[b * block + i] - out[b * block + i])));
        CHECK(err <= half_max_gap(kind) * q.scales[b] * (1 + 1e-6));
      }
    }
  }
}

TEST_CASE("code layout: int8 two's-complement bytes, NF4 element 2i in the low nibble") {
  const int block = 4;
  // absmax 2: NF4 codes of w / 2 = {1, -1, 0, 0.16} are {15, 0, 7, 9}; int8 codes of w / (2/127).
  const std::vector<float> w = {2.0f, -2.0f, 0.0f, 0.32f};
  const Quantized q8 = quantize(QuantKind::Int8, w, block);
  CHECK(q8.scales[0] == 2.0f / 127.0f);
  CHECK(q8.codes == std::vector<uint8_t>{127, 0x81, 0, uint8_t(std::lround(0.32 / (2.0f / 127.0f)))});
  const Quantized q4 = quantize(QuantKind::NF4, w, block);
  CHECK(q4.scales[0] == 2.0f);
  CHECK(q4.codes == std::vector<uint8_t>{0x0f, 0x97});
  // And back: the op reads the same layout.
  auto cpu = make_cpu_backend();
  std::vector<float> out(4);
  cpu->dequantize(out.data(), q4.codes.data(), q4.scales.data(), 4, block, int(QuantKind::NF4));
  CHECK(out == std::vector<float>{2.0f, -2.0f, 0.0f, 2.0f * kNF4Levels[9]});
  cpu->dequantize(out.data(), q8.codes.data(), q8.scales.data(), 4, block, int(QuantKind::Int8));
  CHECK(out[0] == 127.0f * (2.0f / 127.0f));
  CHECK(out[1] == -127.0f * (2.0f / 127.0f));
  CHECK(out[2] == 0.0f);
  // The op decodes any byte, -128 (0x80) included, though the quantizer never writes it.
  const std::vector<uint8_t> raw = {0x80, 0xff, 0x01, 0x7f};
  const std::vector<float> one = {0.5f};
  cpu->dequantize(out.data(), raw.data(), one.data(), 4, block, int(QuantKind::Int8));
  CHECK(out == std::vector<float>{-64.0f, -0.5f, 0.5f, 63.5f});
}

TEST_CASE("16-bit and double outputs: the product computed once, rounded once") {
  auto cpu = make_cpu_backend();
  const int block = 64;
  const size_t n = 64 * 301;
  std::vector<float> w = weights_with_outliers(n, block, 5);
  for (size_t i = 0; i < n; ++i) w[i] *= 0.0371f;  // scales off powers of two: the roundings bite
  for (QuantKind kind : {QuantKind::Int8, QuantKind::NF4}) {
    const Quantized q = quantize(kind, w, block);
    std::vector<float> f32(n);
    std::vector<bf16> b16(n);
    std::vector<fp16> f16(n);
    cpu->dequantize(f32.data(), q.codes.data(), q.scales.data(), n, block, int(kind));
    cpu->dequantize(b16.data(), q.codes.data(), q.scales.data(), n, block, int(kind));
    cpu->dequantize(f16.data(), q.codes.data(), q.scales.data(), n, block, int(kind));
    // The double instantiation (acc_t<double> scales).
    std::vector<double> scales_d(q.scales.begin(), q.scales.end()), f64(n);
    cpu::dequantize<double>(f64.data(), q.codes.data(), scales_d.data(), n, block, int(kind));
    size_t bad32 = 0, bad_b16 = 0, bad_f16 = 0, bad64 = 0, rounded = 0;
    for (size_t i = 0; i < n; ++i) {
      const double level = level_at(kind, q.codes, i), s = q.scales[i / block];
      const float p = float(level) * float(s);  // the fp32 product
      bad32 += f32[i] != p;
      bad_b16 += b16[i].bits != bf16::from_float(p);
      bad_f16 += f16[i].bits != fp16::from_float(p);
      bad64 += f64[i] != level * s;
      rounded += float(b16[i]) != p;
    }
    INFO(quant_kind_name(kind));
    CHECK(bad32 == 0);
    CHECK(bad_b16 == 0);
    CHECK(bad_f16 == 0);
    CHECK(bad64 == 0);
    CHECK(rounded > n / 2);  // the bf16 outputs were really rounded (the test is not vacuous)
  }
  // An output of a dtype the op has no form for (int32) is refused like any other op's.
  std::vector<uint8_t> codes(64);
  std::vector<float> scales(1, 1.0f);
  std::vector<int32_t> i32(64);
  CHECK_THROWS_AS(cpu->dequantize(i32.data(), codes.data(), scales.data(), 64, 64, 0), std::logic_error);
}

TEST_CASE("dequantize: any n, a partial last block, nothing written beyond n") {
  auto cpu = make_cpu_backend();
  const int block = 64;
  const size_t n = 4 * size_t(block);
  const std::vector<float> w = randn(n, 17);
  for (QuantKind kind : {QuantKind::Int8, QuantKind::NF4}) {
    const Quantized q = quantize(kind, w, block);
    std::vector<float> full(n), part(n, 777.0f);
    cpu->dequantize(full.data(), q.codes.data(), q.scales.data(), n, block, int(kind));
    const size_t m = n - 37;  // odd, and ends inside the last block
    cpu->dequantize(part.data(), q.codes.data(), q.scales.data(), m, block, int(kind));
    INFO(quant_kind_name(kind));
    CHECK(std::equal(part.begin(), part.begin() + long(m), full.begin()));
    CHECK(std::count(part.begin() + long(m), part.end(), 777.0f) == long(n - m));
    cpu->dequantize(part.data(), q.codes.data(), q.scales.data(), 0, block, int(kind));  // n = 0: nothing
    CHECK(part[0] == full[0]);
  }
}

TEST_CASE("bad arguments: std::invalid_argument saying what is wrong") {
  std::vector<float> w = randn(256, 3);
  std::vector<uint8_t> codes(256);
  std::vector<float> scales(256);
  for (QuantKind kind : {QuantKind::Int8, QuantKind::NF4}) {
    CHECK_THROWS_WITH(quantize_blockwise(kind, w.data(), 250, 64, codes.data(), scales.data()),
                      Catch::Contains("not a multiple of the block size 64"));
    CHECK_THROWS_WITH(quantize_blockwise(kind, w.data(), 255, 51, codes.data(), scales.data()),
                      Catch::Contains("block must be even and positive, got 51"));
    CHECK_THROWS_AS(quantize_blockwise(kind, w.data(), 256, 0, codes.data(), scales.data()), std::invalid_argument);
    CHECK_THROWS_AS(quantize_blockwise(kind, w.data(), 256, -64, codes.data(), scales.data()), std::invalid_argument);
    CHECK_THROWS_WITH(quantize_blockwise(kind, nullptr, 256, 64, codes.data(), scales.data()), Catch::Contains("null"));
    CHECK_THROWS_AS(quantize_blockwise(kind, w.data(), 256, 64, nullptr, scales.data()), std::invalid_argument);
    CHECK_THROWS_AS(quantize_blockwise(kind, w.data(), 256, 64, codes.data(), nullptr), std::invalid_argument);
    CHECK_NOTHROW(quantize_blockwise(kind, nullptr, 0, 64, nullptr, nullptr));  // n = 0: nothing to do
    std::vector<float> bad = w;
    bad[130] = std::numeric_limits<float>::quiet_NaN();
    bad[200] = std::numeric_limits<float>::infinity();
    CHECK_THROWS_WITH(quantize_blockwise(kind, bad.data(), 256, 64, codes.data(), scales.data()),
                      Catch::Contains("weight 130 is not finite"));
    bad[130] = 0;
    CHECK_THROWS_WITH(quantize_blockwise(kind, bad.data(), 256, 64, codes.data(), scales.data()),
                      Catch::Contains("weight 200 is not finite"));
  }
  CHECK_THROWS_WITH(quantize_blockwise(static_cast<QuantKind>(2), w.data(), 256, 64, codes.data(), scales.data()),
                    Catch::Contains("unknown quantization kind 2"));

  auto cpu = make_cpu_backend();
  std::vector<float> out(256);
  CHECK_THROWS_WITH(cpu->dequantize(out.data(), codes.data(), scales.data(), 256, 64, 2),
                    Catch::Contains("unknown quantization kind 2"));
  CHECK_THROWS_AS(cpu->dequantize(out.data(), codes.data(), scales.data(), 256, 64, -1), std::invalid_argument);
  CHECK_THROWS_WITH(cpu->dequantize(out.data(), codes.data(), scales.data(), 256, 0, 0),
                    Catch::Contains("block must be positive"));
  CHECK_THROWS_AS(cpu->dequantize(out.data(), codes.data(), scales.data(), 256, -64, 1), std::invalid_argument);
}
