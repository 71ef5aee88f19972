// The CPU backend's dtype plumbing at 16-bit compute (part of the test_cpu_ops_lowp binary):
// a tensor of the wrong dtype is refused, `convert` rounds fp32 to bf16 and fp16 as IEEE says
// (ties to even, subnormals, inf, NaN, fp16 saturation) and its vector paths equal the scalar
// conversions of kernels/dtype.hpp bit for bit, and peak_flops/precision_note answer for every
// compute dtype.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <stdexcept>
#include <utility>
#include <vector>

#include "kernels/backend.hpp"
#include "kernels/cpu/onednn_gemm.hpp"

using namespace loom;
namespace onednn = loom::cpu::onednn;

TEST_CASE("a buffer of the wrong dtype throws", "[lowp]") {
  auto be = make_cpu_backend();
  std::vector<bf16> xb(12);
  std::vector<float> xf(12), mean(2), rstd(2), w(6), b(6);
  // bf16 input where the call (its first typed tensor, fp32) runs in fp32.
  CHECK_THROWS_AS(be->layernorm_forward(xf.data(), mean.data(), rstd.data(), xb.data(), w.data(), b.data(), 2, 6),
                  std::logic_error);
  // fp32 weights in a bf16 call.
  std::vector<bf16> out(4), bias(2);
  CHECK_THROWS_AS(be->matmul_forward(out.data(), xb.data(), xf.data(), bias.data(), 2, 6, 2), std::logic_error);
}

TEST_CASE("convert rounds to nearest even, keeps inf and NaN, saturates fp16 to inf", "[lowp]") {
  auto be = make_cpu_backend();
  auto f = [](uint32_t u) { return dtype_bits::bits_float(u); };
  // (fp32 bits, expected bf16 bits): ties to even, above/below half, inf, FLT_MAX -> inf, and
  // fp32 subnormals (which the AVX512_BF16 instruction alone would flush to zero).
  const std::vector<std::pair<uint32_t, uint16_t>> to_bf16 = {
      {0x3f808000, 0x3f80}, {0x3f818000, 0x3f82}, {0x3f808001, 0x3f81}, {0x3f807fff, 0x3f80}, {0xbf808000, 0xbf80},
      {0x7f800000, 0x7f80}, {0xff800000, 0xff80}, {0x7f7fffff, 0x7f80}, {0x00000001, 0x0000}, {0x00008000, 0x0000},
      {0x00018000, 0x0002}, {0x007fffff, 0x0080}, {0x80010000, 0x8001}, {0x00000000, 0x0000}, {0x80000000, 0x8000},
      {0x3f800000, 0x3f80}, {0x40490fdb, 0x4049}};  // 17 values: the vector path and a scalar tail
  std::vector<float> src;
  for (auto& p : to_bf16) src.push_back(f(p.first));
  src.push_back(std::numeric_limits<float>::quiet_NaN());
  std::vector<bf16> dst(src.size());
  be->convert(TypedPtr(dst.data()), ConstTypedPtr(src.data()), src.size());
  for (size_t i = 0; i < to_bf16.size(); ++i) {
    INFO("fp32 0x" << std::hex << to_bf16[i].first);
    CHECK(dst[i].bits == to_bf16[i].second);
  }
  CHECK(std::isnan(float(dst.back())));
  // fp16: 65504 is the largest finite; from 65520 on it rounds to inf; subnormals tie to even.
  const std::vector<std::pair<float, uint16_t>> to_fp16 = {
      {65504.f, 0x7bff}, {65519.f, 0x7bff}, {65520.f, 0x7c00}, {1e6f, 0x7c00}, {-1e6f, 0xfc00},
      {5.9604644775390625e-8f, 0x0001}, {2.98023223876953125e-8f, 0x0000}, {8.94069671630859375e-8f, 0x0002},
      {6.103515625e-5f, 0x0400}, {1.0f, 0x3c00}, {-2.5f, 0xc100}, {f(0x7f800000), 0x7c00}, {1.00048828125f, 0x3c00},
      {1.00146484375f, 0x3c02}, {0.0f, 0x0000}, {-0.0f, 0x8000}, {1e-10f, 0x0000}};
  std::vector<float> hs;
  for (auto& p : to_fp16) hs.push_back(p.first);
  hs.push_back(std::numeric_limits<float>::quiet_NaN());
  std::vector<fp16> hd(hs.size());
  be->convert(TypedPtr(hd.data()), ConstTypedPtr(hs.data()), hs.size());
  for (size_t i = 0; i < to_fp16.size(); ++i) {
    INFO("fp32 " << to_fp16[i].first);
    CHECK(hd[i].bits == to_fp16[i].second);
  }
  CHECK(std::isnan(float(hd.back())));
}

TEST_CASE("convert: every 16-bit value round-trips; the vector paths equal the scalar ones", "[lowp]") {
  auto be = make_cpu_backend();
  std::vector<bf16> b(65536), b2(65536);
  std::vector<fp16> h(65536), h2(65536);
  for (uint32_t i = 0; i < 65536; ++i) b[i].bits = h[i].bits = uint16_t(i);
  std::vector<float> fb(65536), fh(65536);
  be->convert(TypedPtr(fb.data()), ConstTypedPtr(b.data()), 65536);
  be->convert(TypedPtr(fh.data()), ConstTypedPtr(h.data()), 65536);
  be->convert(TypedPtr(b2.data()), ConstTypedPtr(fb.data()), 65536);
  be->convert(TypedPtr(h2.data()), ConstTypedPtr(fh.data()), 65536);
  size_t bad_b = 0, bad_h = 0;
  for (uint32_t i = 0; i < 65536; ++i) {
    if (fb[i] != float(b[i]) && !std::isnan(fb[i])) ++bad_b;
    if (fh[i] != float(h[i]) && !std::isnan(fh[i])) ++bad_h;
    if (std::isnan(fb[i]) ? !std::isnan(float(b2[i])) : b2[i].bits != b[i].bits) ++bad_b;
    if (std::isnan(fh[i]) ? !std::isnan(float(h2[i])) : h2[i].bits != h[i].bits) ++bad_h;
  }
  CHECK(bad_b == 0);
  CHECK(bad_h == 0);
  // Random fp32 bit patterns (all exponents: subnormals, huge values, inf, NaN): the vectorised
  // convert equals the scalar conversion of kernels/dtype.hpp bit for bit (NaN: a NaN).
  std::mt19937 rng(7);
  std::vector<float> src(1 << 20);
  for (auto& x : src) x = dtype_bits::bits_float(rng());
  std::vector<bf16> vb(src.size());
  std::vector<fp16> vh(src.size());
  be->convert(TypedPtr(vb.data()), ConstTypedPtr(src.data()), src.size());
  be->convert(TypedPtr(vh.data()), ConstTypedPtr(src.data()), src.size());
  size_t nb = 0, nh = 0;
  for (size_t i = 0; i < src.size(); ++i) {
    if (std::isnan(src[i])) {
      nb += !std::isnan(float(vb[i]));
      nh += !std::isnan(float(vh[i]));
    } else {
      nb += vb[i].bits != bf16(src[i]).bits;
      nh += vh[i].bits != fp16(src[i]).bits;
    }
  }
  CHECK(nb == 0);
  CHECK(nh == 0);
}

TEST_CASE("peak_flops and precision_note answer for every compute dtype", "[lowp]") {
  auto be = make_cpu_backend();
  CHECK(measure_bf16_gemm_flops(256, 2) > 0);
  CHECK(be->precision_note(DType::f32).empty());
  if (onednn::built() && onednn::cpu_has_native_bf16()) CHECK(be->precision_note(DType::bf16).empty());
  if (!onednn::built()) CHECK(!be->precision_note(DType::bf16).empty());
  // Where the bf16 matmuls widen (no oneDNN bf16 on this CPU), the note says so, and loom plan
  // prices bf16 at the fp32 rate.
  if (cpu_matmul_widens(DType::bf16)) CHECK(be->precision_note(DType::bf16).find("widened") != std::string::npos);
  if (onednn::built() && onednn::cpu_has_native_bf16()) CHECK(!cpu_matmul_widens(DType::bf16));
  CHECK(!cpu_matmul_widens(DType::f32));
}
