// Every CPU op at bf16 and fp16 against the fp32 op on the same inputs, through the CpuBackend.
// Inputs are first rounded to the 16-bit type, so the fp32 op sees exactly the values the 16-bit
// op sees and is the exact-input reference: what is left is the 16-bit op's own error, i.e. the
// one rounding of each stored result (unit roundoff u: bf16 2^-8, fp16 2^-11) and, where a
// product runs through another library (oneDNN) or another layout, fp32 sums in another order.
// Shapes are odd (not multiples of 16 or 32). Also: the oneDNN path against the widening
// reference (LOOM_CPU_MATMUL=reference), and that fp32 gradients accumulate at 16-bit compute.
// The dtype checks and the conversions are in test_cpu_convert.cpp (the same test binary).
#include <catch2/catch.hpp>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <omp.h>
#include <random>
#include <vector>

#include "kernels/backend.hpp"
#include "kernels/cpu/onednn_gemm.hpp"

using namespace loom;
namespace onednn = loom::cpu::onednn;

namespace {

template <typename T>
constexpr double kU = std::is_same_v<T, bf16> ? 1.0 / 256 : 1.0 / 2048;  // unit roundoff
// Absolute rounding error of a stored value below the normal range: half the subnormal spacing
// (fp16 2^-25; bf16's subnormals, below 1e-38, never occur here).
template <typename T>
constexpr double kSubnormal = std::is_same_v<T, bf16> ? 0.0 : 2.9802322387695312e-8;
constexpr double kU32 = 5.9604644775390625e-8;  // fp32 unit roundoff, 2^-24

// n values ~ N(0, scale), rounded to T; `f` gets the same values as floats.
template <typename T>
std::vector<T> rand_lowp(size_t n, unsigned seed, std::vector<float>& f, double scale = 1.0) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> d(0.f, float(scale));
  std::vector<T> v(n);
  f.resize(n);
  for (size_t i = 0; i < n; ++i) {
    v[i] = T(d(rng));
    f[i] = float(v[i]);
  }
  return v;
}

// |got - ref| <= atol[i] + rtol * |ref| everywhere (atol per element or one value); prints
// max-abs, max-rel and the first bad index on failure.
template <typename G>
void check_close(const char* what, const G* got, const std::vector<float>& ref, double rtol,
                 const std::vector<double>& atol) {
  size_t nbad = 0, first = 0;
  double max_abs = 0, max_rel = 0;
  for (size_t i = 0; i < ref.size(); ++i) {
    const double g = float(got[i]), r = ref[i];
    const double a = atol.size() == 1 ? atol[0] : atol[i];
    const double e = std::fabs(g - r);
    const bool ok = std::isnan(r) ? std::isnan(g) : e <= a + rtol * std::fabs(r);
    max_abs = std::max(max_abs, e);
    if (r != 0) max_rel = std::max(max_rel, e / std::fabs(r));
    if (!ok && nbad++ == 0) first = i;
  }
  INFO(what << ": " << nbad << " of " << ref.size() << " outside; max-abs " << max_abs << " max-rel " << max_rel
            << "; first bad index " << first << " got " << (nbad ? float(got[first]) : 0.f) << " ref "
            << (nbad ? ref[first] : 0.f));
  CHECK(nbad == 0);
}
template <typename G>
void check_close(const char* what, const G* got, const std::vector<float>& ref, double rtol, double atol) {
  check_close(what, got, ref, rtol, std::vector<double>{atol});
}
// Bitwise: the 16-bit path runs the same fp32 arithmetic on the same values as the fp32 op.
void check_same(const char* what, const std::vector<float>& got, const std::vector<float>& ref) {
  check_close(what, got.data(), ref, 0.0, 0.0);
}

// gamma_K * sum_k |a_ik| |b_kj|: how far two fp32 sums of the same K products in different orders
// may drift apart (Higham's bound, gamma_K ~ K u32, doubled for the two orders). a (M,K) row-major;
// b as the op reads it: b_trans ? (N,K) : (K,N).
std::vector<double> reorder_bound(const std::vector<float>& a, const std::vector<float>& b, int M, int K, int N,
                                  bool b_trans, bool a_trans = false) {
  std::vector<double> out(size_t(M) * N);
  for (int i = 0; i < M; ++i)
    for (int j = 0; j < N; ++j) {
      double s = 0;
      for (int k = 0; k < K; ++k)
        s += std::fabs(a_trans ? a[size_t(k) * M + i] : a[size_t(i) * K + k]) *
             std::fabs(b_trans ? b[size_t(j) * K + k] : b[size_t(k) * N + j]);
      out[size_t(i) * N + j] = 2.0 * (K + 2) * kU32 * s;
    }
  return out;
}

template <typename T>
std::vector<float> widened(const std::vector<T>& v) {
  return std::vector<float>(v.begin(), v.end());
}

}  // namespace

TEMPLATE_TEST_CASE("16-bit encoder, residual, gelu and zero match fp32", "[lowp]", bf16, fp16) {
  using T = TestType;
  auto be = make_cpu_backend();
  const int B = 3, Tn = 13, C = 37, V = 29, start = 5, rows = 17;
  std::vector<int32_t> tok(B * Tn);
  for (int i = 0; i < B * Tn; ++i) tok[i] = (i * 7 + 3) % V;  // some fall outside [start, start + rows)
  std::vector<float> wte_f, wpe_f, d_f, out_f(B * Tn * C);
  auto wte = rand_lowp<T>(rows * C, 1, wte_f), wpe = rand_lowp<T>(Tn * C, 2, wpe_f), d = rand_lowp<T>(B * Tn * C, 3, d_f);
  std::vector<T> out(B * Tn * C);
  be->encoder_forward(out.data(), tok.data(), wte.data(), wpe.data(), B, Tn, C, start, rows);
  be->encoder_forward(out_f.data(), tok.data(), wte_f.data(), wpe_f.data(), B, Tn, C, start, rows);
  // One rounding of the fp32 sum: |error| <= u |ref| (+ fp16's subnormal half-spacing).
  check_close("encoder out", out.data(), out_f, kU<T>, kSubnormal<T>);
  std::vector<float> dwte(rows * C, 0.5f), dwpe(Tn * C, -0.25f), dwte_f = dwte, dwpe_f = dwpe;
  be->encoder_backward(dwte.data(), dwpe.data(), d.data(), tok.data(), B, Tn, C, start, rows);
  be->encoder_backward(dwte_f.data(), dwpe_f.data(), d_f.data(), tok.data(), B, Tn, C, start, rows);
  check_same("encoder dwte (fp32, accumulated)", dwte, dwte_f);
  check_same("encoder dwpe (fp32, accumulated)", dwpe, dwpe_f);

  const size_t n = 5 * 1024 + 37;  // several 16-bit chunks and a ragged tail
  std::vector<float> a_f, b_f, r_f(n), g_f(n), gb_f(n);
  auto a = rand_lowp<T>(n, 4, a_f, 2.0), b = rand_lowp<T>(n, 5, b_f);
  std::vector<T> r(n), g(n), gb(n);
  be->residual_forward(r.data(), a.data(), b.data(), n);
  be->residual_forward(r_f.data(), a_f.data(), b_f.data(), n);
  check_close("residual", r.data(), r_f, kU<T>, kSubnormal<T>);  // one rounding of an exact fp32 sum
  be->gelu_forward(g.data(), a.data(), n);
  be->gelu_forward(g_f.data(), a_f.data(), n);
  check_close("gelu", g.data(), g_f, kU<T>, kSubnormal<T>);  // the fp32 expression, rounded once
  std::vector<T> gb_alias = b;                              // dinp may alias dout
  be->gelu_backward(gb.data(), a.data(), b.data(), n);
  be->gelu_backward(gb_alias.data(), a.data(), gb_alias.data(), n);
  be->gelu_backward(gb_f.data(), a_f.data(), b_f.data(), n);
  check_close("gelu backward", gb.data(), gb_f, kU<T>, kSubnormal<T>);
  check_close("gelu backward, aliased", gb_alias.data(), gb_f, kU<T>, kSubnormal<T>);
  be->zero(TypedPtr(r.data()), n);
  for (size_t i = 0; i < n; ++i) REQUIRE(r[i].bits == 0);
}

TEMPLATE_TEST_CASE("16-bit layernorm matches fp32; its fp32 gradients accumulate", "[lowp]", bf16, fp16) {
  using T = TestType;
  auto be = make_cpu_backend();
  const int N = 23, C = 77;
  std::vector<float> x_f, w_f, b_f, d_f, di_f;
  auto x = rand_lowp<T>(N * C, 6, x_f, 3.0), w = rand_lowp<T>(C, 7, w_f), b = rand_lowp<T>(C, 8, b_f);
  auto d = rand_lowp<T>(N * C, 9, d_f), di = rand_lowp<T>(N * C, 10, di_f);
  std::vector<T> out(N * C);
  std::vector<float> out_f(N * C), mean(N), rstd(N), mean_f(N), rstd_f(N);
  be->layernorm_forward(out.data(), mean.data(), rstd.data(), x.data(), w.data(), b.data(), N, C);
  be->layernorm_forward(out_f.data(), mean_f.data(), rstd_f.data(), x_f.data(), w_f.data(), b_f.data(), N, C);
  check_same("mean", mean, mean_f);
  check_same("rstd", rstd, rstd_f);
  check_close("layernorm out", out.data(), out_f, kU<T>, kSubnormal<T>);  // the fp32 value rounded once
  std::vector<float> dw(C, 1.0f), db(C, -1.0f), dw_f = dw, db_f = db;  // accumulate onto non-zero
  be->layernorm_backward(di.data(), dw.data(), db.data(), d.data(), x.data(), w.data(), mean.data(), rstd.data(), N, C);
  be->layernorm_backward(di_f.data(), dw_f.data(), db_f.data(), d_f.data(), x_f.data(), w_f.data(), mean_f.data(),
                         rstd_f.data(), N, C);
  // dinp += ...: the 16-bit dinp is widened, the fp32 increment added, the sum rounded once.
  check_close("layernorm dinp (accumulated)", di.data(), di_f, kU<T>, kSubnormal<T>);
  check_same("layernorm dw (fp32, accumulated)", dw, dw_f);
  check_same("layernorm db (fp32, accumulated)", db, db_f);
}

TEMPLATE_TEST_CASE("16-bit matmul matches fp32, forward and backward; dW and dbias accumulate", "[lowp]", bf16,
                   fp16) {
  using T = TestType;
  auto be = make_cpu_backend();
  const int N = 67, C = 45, OC = 77;
  const char* mode = GENERATE("fast", "reference");
  if (std::strcmp(mode, "reference") == 0) setenv("LOOM_CPU_MATMUL", "reference", 1);
  INFO("path " << mode);
  std::vector<float> x_f, w_f, bias_f, d_f;
  auto x = rand_lowp<T>(N * C, 11, x_f), w = rand_lowp<T>(OC * C, 12, w_f), bias = rand_lowp<T>(OC, 13, bias_f);
  auto d = rand_lowp<T>(N * OC, 14, d_f);
  std::vector<T> out(N * OC), dx(N * C, T(7.0f));  // dinp is overwritten: start it dirty
  std::vector<float> out_f(N * OC), dx_f(N * C);
  be->matmul_forward(out.data(), x.data(), w.data(), bias.data(), N, C, OC);
  be->matmul_forward(out_f.data(), x_f.data(), w_f.data(), bias_f.data(), N, C, OC);
  // One rounding (u |ref|) of an fp32 sum whose order may differ (oneDNN): + the reorder bound.
  auto fwd_bound = reorder_bound(x_f, w_f, N, C, OC, true);
  for (int i = 0; i < N; ++i)
    for (int j = 0; j < OC; ++j) fwd_bound[size_t(i) * OC + j] += 2 * kU32 * std::fabs(bias_f[j]) + kSubnormal<T>;
  check_close("matmul out", out.data(), out_f, kU<T>, fwd_bound);

  std::vector<float> dw(OC * C), db(OC);
  for (int i = 0; i < OC * C; ++i) dw[i] = 0.125f * (i % 5);  // accumulate onto non-zero gradients
  for (int i = 0; i < OC; ++i) db[i] = -0.5f;
  std::vector<float> dw_f = dw, db_f = db;
  be->matmul_backward(dx.data(), dw.data(), db.data(), d.data(), x.data(), w.data(), N, C, OC);
  be->matmul_backward(dx_f.data(), dw_f.data(), db_f.data(), d_f.data(), x_f.data(), w_f.data(), N, C, OC);
  auto dx_bound = reorder_bound(d_f, w_f, N, OC, C, false);
  for (auto& a : dx_bound) a += kSubnormal<T>;
  check_close("matmul dinp", dx.data(), dx_f, kU<T>, dx_bound);
  // dW (fp32): the same exact products (a 16-bit product is exact in fp32) summed in another
  // order, plus the one rounding of adding onto the old value.
  auto dw_bound = reorder_bound(d_f, x_f, OC, N, C, false, true);
  check_close("matmul dW (fp32, accumulated)", dw.data(), dw_f, 2 * kU32, dw_bound);
  check_same("matmul dbias (fp32, accumulated, same order)", db, db_f);
  unsetenv("LOOM_CPU_MATMUL");
}

TEST_CASE("bf16 matmul: oneDNN path against the widening reference path", "[lowp]") {
  auto be = make_cpu_backend();
  const int N = 131, C = 83, OC = 59;
  if (onednn::built()) {
    // With oneDNN built and a CPU with native bf16 dot products the fast path must really be
    // oneDNN for these shapes. Elsewhere (an AVX2-only CPU: oneDNN 2.6 has only its reference
    // bf16 matmul there, which gemm() refuses) both calls below take the widening path.
    onednn::GemmDesc d{DType::bf16, DType::bf16, N, C, OC, false, true, true, false};
    if (onednn::cpu_has_native_bf16()) CHECK(onednn::supported(d));
    else WARN("no native bf16 on this CPU: oneDNN " << (onednn::supported(d) ? "runs" : "does not run") << " this shape");
  }
  std::vector<float> x_f, w_f, b_f, d_f;
  auto x = rand_lowp<bf16>(N * C, 21, x_f), w = rand_lowp<bf16>(OC * C, 22, w_f), b = rand_lowp<bf16>(OC, 23, b_f);
  auto d = rand_lowp<bf16>(N * OC, 24, d_f);
  std::vector<bf16> out(N * OC), ref(N * OC), dx(N * C), dx_ref(N * C);
  std::vector<float> dw(OC * C, 1.0f), dw_ref = dw;
  be->matmul_forward(out.data(), x.data(), w.data(), b.data(), N, C, OC);
  be->matmul_backward(dx.data(), dw.data(), nullptr, d.data(), x.data(), w.data(), N, C, OC);
  setenv("LOOM_CPU_MATMUL", "reference", 1);
  be->matmul_forward(ref.data(), x.data(), w.data(), b.data(), N, C, OC);
  be->matmul_backward(dx_ref.data(), dw_ref.data(), nullptr, d.data(), x.data(), w.data(), N, C, OC);
  unsetenv("LOOM_CPU_MATMUL");
  // Both are roundings of fp32 sums of the same products: they may differ by one rounding each
  // (2u relative) plus the reorder bound.
  check_close("forward vs reference", out.data(), widened(ref), 2 * kU<bf16>, reorder_bound(x_f, w_f, N, C, OC, true));
  check_close("dinp vs reference", dx.data(), widened(dx_ref), 2 * kU<bf16>, reorder_bound(d_f, w_f, N, OC, C, false));
  check_close("dW vs reference", dw.data(), dw_ref, 2 * kU32, reorder_bound(d_f, x_f, OC, N, C, false, true));
  // A second backward adds the same gradient again (fp32 destination with a sum post-op).
  std::vector<float> dw2 = dw;
  be->matmul_backward(nullptr, dw2.data(), nullptr, d.data(), x.data(), w.data(), N, C, OC);
  std::vector<float> twice(dw.size());
  for (size_t i = 0; i < dw.size(); ++i) twice[i] = 2 * dw[i] - 1.0f;
  check_close("dW accumulates", dw2.data(), twice, 4 * kU32, reorder_bound(d_f, x_f, OC, N, C, false, true));
}

TEMPLATE_TEST_CASE("16-bit attention matches fp32", "[lowp]", bf16, fp16) {
  using T = TestType;
  auto be = make_cpu_backend();
  const int Tn = GENERATE(7, 70);  // one row block; two, the second ragged
  // bf16: the oneDNN path (where the build has it) and the widened reference path
  const char* mode = std::is_same_v<T, bf16> ? GENERATE("onednn", "reference") : "reference";
  if (std::strcmp(mode, "reference") == 0) setenv("LOOM_CPU_MATMUL", "reference", 1);
  const bool bf16_products = std::is_same_v<T, bf16> && onednn::built() && std::strcmp(mode, "onednn") == 0;
  INFO("Tn " << Tn << ", " << mode);
  const int B = 2, C = 54, NH = 3, hs = C / NH;
  std::vector<float> qkv_f, d_f;
  auto qkv = rand_lowp<T>(size_t(B) * Tn * 3 * C, 31, qkv_f), d = rand_lowp<T>(size_t(B) * Tn * C, 32, d_f);
  REQUIRE(be->attention_saved_bytes(B, Tn, NH, dtype_of<T>) == size_t(B) * NH * Tn * Tn * sizeof(T));
  std::vector<T> out(B * Tn * C), att(size_t(B) * NH * Tn * Tn), dqkv(qkv.size());
  std::vector<float> out_f(out.size()), att_f(att.size()), dqkv_f(qkv.size());
  be->attention_forward(out.data(), att.data(), qkv.data(), B, Tn, C, NH);
  be->attention_forward(out_f.data(), att_f.data(), qkv_f.data(), B, Tn, C, NH);
  // The fp32 head on widened copies (another layout, so sgemm may sum in another order: sums
  // of at most T terms of size <= max|out|), rounded once. The oneDNN bf16 path multiplies v by
  // the probabilities rounded to bf16 (relative error u each), so an output element may also be
  // off by u * sum_j P_tj |v_j|.
  double mo = 0;
  for (float v : out_f) mo = std::max(mo, double(std::fabs(v)));
  std::vector<double> out_atol(out.size(), 4.0 * Tn * kU32 * mo + kSubnormal<T>);
  if (bf16_products)
    for (int b = 0; b < B; ++b)
      for (int t = 0; t < Tn; ++t)
        for (int c = 0; c < C; ++c) {
          const int h = c / hs;
          double s = 0;
          for (int j = 0; j <= t; ++j)
            s += att_f[((size_t(b) * NH + h) * Tn + t) * Tn + j] * std::fabs(qkv_f[(size_t(b) * Tn + j) * 3 * C + 2 * C + c]);
          out_atol[(size_t(b) * Tn + t) * C + c] += kU<T> * s;
        }
  check_close("attention out", out.data(), out_f, kU<T>, out_atol);
  check_close("saved probabilities", att.data(), att_f, kU<T>, 4.0 * Tn * kU32 + kSubnormal<T>);
  be->attention_backward(dqkv.data(), d.data(), qkv.data(), out.data(), att.data(), B, Tn, C, NH);
  be->attention_backward(dqkv_f.data(), d_f.data(), qkv_f.data(), out_f.data(), att_f.data(), B, Tn, C, NH);
  // Backward reads the probabilities rounded to 16 bits (relative error u each), and the oneDNN
  // path also rounds dS to bf16 before dq = dS k and dk = dS^T q: every product they enter is off
  // by up to u times its own size, which is bounded by a few times the largest gradient; plus
  // the final rounding (u |ref|).
  double md = 0;
  for (float v : dqkv_f) md = std::max(md, double(std::fabs(v)));
  check_close("attention dqkv", dqkv.data(), dqkv_f, 2 * kU<T>, 4.0 * kU<T> * md + kSubnormal<T>);
  // The oneDNN path is deterministic: the same bits at 1 thread as at the default (each element
  // is one fixed-order sum). (The widened path is not held to this: its OpenBLAS gemms on the
  // fp32 copies were seen to differ in the last fp32 bits between 1 and 2 threads, visible after
  // rounding to fp16.)
  if (!bf16_products) {
    unsetenv("LOOM_CPU_MATMUL");
    return;
  }
  const int saved = omp_get_max_threads();
  omp_set_num_threads(1);
  std::vector<T> out1(out.size()), att1(att.size()), dqkv1(dqkv.size());
  be->attention_forward(out1.data(), att1.data(), qkv.data(), B, Tn, C, NH);
  be->attention_backward(dqkv1.data(), d.data(), qkv.data(), out1.data(), att1.data(), B, Tn, C, NH);
  omp_set_num_threads(saved);
  CHECK(std::memcmp(out1.data(), out.data(), out.size() * sizeof(T)) == 0);
  CHECK(std::memcmp(att1.data(), att.data(), att.size() * sizeof(T)) == 0);
  CHECK(std::memcmp(dqkv1.data(), dqkv.data(), dqkv.size() * sizeof(T)) == 0);
  unsetenv("LOOM_CPU_MATMUL");
}

TEMPLATE_TEST_CASE("16-bit cross-entropy matches fp32: losses exactly, dlogits rounded once", "[lowp]", bf16, fp16) {
  using T = TestType;
  auto be = make_cpu_backend();
  const int N = 37, V = 101, Vp = 112;
  const float dloss = 1.0f / N;
  std::vector<int32_t> tgt(N);
  for (int i = 0; i < N; ++i) tgt[i] = (i * 13 + 1) % V;
  std::vector<float> lg_f;
  auto lg = rand_lowp<T>(size_t(N) * Vp, 41, lg_f, 2.0);
  std::vector<T> lg2 = lg;
  std::vector<float> lg2_f = lg_f, loss(N), loss_f(N);
  be->softmax_crossentropy(loss.data(), lg.data(), tgt.data(), N, V, Vp, dloss, true);
  be->softmax_crossentropy(loss_f.data(), lg_f.data(), tgt.data(), N, V, Vp, dloss, true);
  check_same("losses", loss, loss_f);  // the same fp32 arithmetic on the same widened logits
  check_close("dlogits", lg.data(), lg_f, kU<T>, kSubnormal<T>);
  // Vocab-parallel form, this rank owning columns [40, 40 + 60) of which 55 are real.
  const int start = 40, Vl = 60, real = 55;
  std::vector<T> part(size_t(N) * Vl);
  std::vector<float> part_f(part.size());
  for (int i = 0; i < N; ++i)
    for (int j = 0; j < Vl; ++j) part[size_t(i) * Vl + j] = lg2[size_t(i) * Vp + j], part_f[size_t(i) * Vl + j] = lg2_f[size_t(i) * Vp + j];
  std::vector<float> mx(N), mx_f(N), p(2 * N), p_f(2 * N);
  be->crossentropy_max(mx.data(), part.data(), N, Vl, real);
  be->crossentropy_max(mx_f.data(), part_f.data(), N, Vl, real);
  check_same("maxes", mx, mx_f);
  be->crossentropy_partials(p.data(), part.data(), mx.data(), tgt.data(), N, Vl, real, start);
  be->crossentropy_partials(p_f.data(), part_f.data(), mx_f.data(), tgt.data(), N, Vl, real, start);
  check_same("partials", p, p_f);
  be->crossentropy_finish(loss.data(), part.data(), mx.data(), p.data(), tgt.data(), N, Vl, real, start, dloss, true);
  be->crossentropy_finish(loss_f.data(), part_f.data(), mx_f.data(), p_f.data(), tgt.data(), N, Vl, real, start, dloss,
                          true);
  check_same("vocab-parallel losses", loss, loss_f);
  check_close("vocab-parallel dlogits", part.data(), part_f, kU<T>, kSubnormal<T>);
}
