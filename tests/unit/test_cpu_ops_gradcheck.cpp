// Every CPU op's backward against central finite differences of its forward, in double
// precision, on odd shapes (sizes that are not multiples of any block or vector width).
// Each check uses the scalar loss L = sum(out * R) with a fixed random R, so dout = R.
#include <catch2/catch.hpp>
#include <omp.h>

#include <cmath>
#include <algorithm>
#include <functional>
#include <random>
#include <vector>

#include "kernels/cpu/cpu_ops.hpp"

using namespace loom::cpu;
using Vec = std::vector<double>;

namespace {

Vec randn(size_t n, unsigned seed, double scale = 1.0) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<double> d(0.0, scale);
  Vec v(n);
  for (auto& x : v) x = d(rng);
  return v;
}

double dot(const Vec& a, const Vec& b) {
  double s = 0;
  for (size_t i = 0; i < a.size(); ++i) s += a[i] * b[i];
  return s;
}

// Compares `analytic` with central differences of `loss` with respect to every element of `x`.
// h = 1e-5 in double: truncation ~h^2 and cancellation ~1e-16/h both sit near 1e-10, so a
// 1e-6 relative (+1e-8 absolute) tolerance leaves room while catching any real mistake.
void fd_check(const char* what, Vec& x, const Vec& analytic, const std::function<double()>& loss) {
  const double h = 1e-5;
  REQUIRE(x.size() == analytic.size());
  double max_err = 0;
  size_t worst = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    const double keep = x[i];
    x[i] = keep + h;
    const double lp = loss();
    x[i] = keep - h;
    const double lm = loss();
    x[i] = keep;
    const double num = (lp - lm) / (2 * h);
    const double err = std::fabs(num - analytic[i]) / (1e-8 + 1e-6 * std::fabs(num));
    if (err > max_err) max_err = err, worst = i;
  }
  INFO(what << ": worst index " << worst << " analytic " << analytic[worst] << " (error/tolerance " << max_err << ")");
  CHECK(max_err <= 1.0);
}

}  // namespace

TEST_CASE("encoder backward matches finite differences, whole and vocab-parallel") {
  const int B = 2, T = 5, C = 7, V = 11;
  std::vector<int32_t> tok = {3, 0, 10, 3, 3, 7, 1, 0, 10, 5};
  // This rank's slice of the vocabulary: all of it, or rows [4, 9) (tokens 10, 0, 1, 3 fall outside).
  const int start = GENERATE(0, 4), rows = start == 0 ? V : 5;
  Vec wte = randn(rows * C, 1), wpe = randn(T * C, 2), R = randn(B * T * C, 3), out(B * T * C);
  auto loss = [&] {
    encoder_forward(out.data(), tok.data(), wte.data(), wpe.data(), B, T, C, start, rows);
    return dot(out, R);
  };
  Vec dwte(rows * C, 0), dwpe(T * C, 0);
  encoder_backward(dwte.data(), dwpe.data(), R.data(), tok.data(), B, T, C, start, rows);
  fd_check("dwte", wte, dwte, loss);
  fd_check("dwpe", wpe, dwpe, loss);
  // Without a position table, out-of-slice tokens give exact zeros.
  encoder_forward<double>(out.data(), tok.data(), wte.data(), nullptr, B, T, C, start, rows);
  for (int bt = 0; bt < B * T; ++bt)
    if (tok[bt] < start || tok[bt] >= start + rows)
      for (int c = 0; c < C; ++c) CHECK(out[bt * C + c] == 0.0);
}

TEST_CASE("layernorm backward matches finite differences and accumulates") {
  const int N = 5, C = 37;
  Vec x = randn(N * C, 4, 2.0), w = randn(C, 5), b = randn(C, 6), R = randn(N * C, 7);
  Vec out(N * C), mean(N), rstd(N);
  auto loss = [&] {
    layernorm_forward(out.data(), mean.data(), rstd.data(), x.data(), w.data(), b.data(), N, C);
    return dot(out, R);
  };
  loss();
  Vec dx(N * C, 0), dw(C, 0), db(C, 0);
  layernorm_backward(dx.data(), dw.data(), db.data(), R.data(), x.data(), w.data(), mean.data(), rstd.data(), N, C);
  fd_check("dinp", x, dx, loss);
  fd_check("dweight", w, dw, loss);
  fd_check("dbias", b, db, loss);
  // A second call adds the same amount again (dinp feeds the residual stream; dw/db accumulate).
  Vec dx2 = dx, dw2 = dw;
  layernorm_backward(dx2.data(), dw2.data(), db.data(), R.data(), x.data(), w.data(), mean.data(), rstd.data(), N, C);
  for (int i = 0; i < N * C; ++i) CHECK(dx2[i] == Approx(2 * dx[i]));
  for (int i = 0; i < C; ++i) CHECK(dw2[i] == Approx(2 * dw[i]));
}

TEST_CASE("matmul backward matches finite differences, with and without bias") {
  const int N = 7, C = 13, OC = 9;
  for (bool with_bias : {true, false}) {
    Vec x = randn(N * C, 8), w = randn(OC * C, 9), b = randn(OC, 10), R = randn(N * OC, 11), out(N * OC);
    auto loss = [&] {
      matmul_forward(out.data(), x.data(), w.data(), with_bias ? b.data() : nullptr, N, C, OC);
      return dot(out, R);
    };
    Vec dx(N * C, 123.0), dw(OC * C, 0), db(OC, 0);  // dinp is overwritten: start it dirty
    matmul_backward(dx.data(), dw.data(), with_bias ? db.data() : nullptr, R.data(), x.data(), w.data(), N, C, OC);
    fd_check("dinp", x, dx, loss);
    fd_check("dweight", w, dw, loss);
    if (with_bias) fd_check("dbias", b, db, loss);
  }
}

TEST_CASE("causal attention backward matches finite differences") {
  // T = 7 fits one 64-row block; T = 67 spans two, the second ragged.
  const int T = GENERATE(7, 67);
  const int B = T < 64 ? 2 : 1, C = T < 64 ? 12 : 6, NH = T < 64 ? 3 : 2;
  Vec qkv = randn(B * T * 3 * C, 12), R = randn(B * T * C, 13), out(B * T * C), att(B * NH * T * T);
  auto loss = [&] {
    attention_forward(out.data(), att.data(), qkv.data(), B, T, C, NH);
    return dot(out, R);
  };
  loss();
  // Causality: the probabilities above the diagonal are exactly zero and each row sums to 1.
  for (int bh = 0; bh < B * NH; ++bh)
    for (int i = 0; i < T; ++i) {
      double s = 0;
      for (int j = 0; j < T; ++j) {
        const double p = att[(size_t(bh) * T + i) * T + j];
        if (j > i) CHECK(p == 0.0);
        s += p;
      }
      CHECK(s == Approx(1.0).epsilon(1e-12));
    }
  Vec dqkv(qkv.size(), 55.0);
  attention_backward(dqkv.data(), R.data(), qkv.data(), out.data(), att.data(), B, T, C, NH);
  fd_check("dqkv", qkv, dqkv, loss);
}

TEST_CASE("gelu backward matches finite differences") {
  const size_t n = 37;
  Vec x = randn(n, 14, 3.0), R = randn(n, 15), out(n);
  auto loss = [&] {
    gelu_forward(out.data(), x.data(), n);
    return dot(out, R);
  };
  Vec dx(n);
  gelu_backward(dx.data(), x.data(), R.data(), n);
  fd_check("dinp", x, dx, loss);
  // In place (dinp aliasing dout), as the model calls it.
  Vec inplace = R;
  gelu_backward(inplace.data(), x.data(), inplace.data(), n);
  for (size_t i = 0; i < n; ++i) CHECK(inplace[i] == dx[i]);
}

TEST_CASE("softmax cross-entropy gradient matches finite differences and ignores the vocab padding") {
  const int N = 6, V = 11, Vp = 16;
  Vec logits = randn(N * Vp, 16, 2.0);
  std::vector<int32_t> tgt = {0, 10, 5, 5, 1, 9};
  // Huge padded logits would win any softmax that looked at them.
  for (int i = 0; i < N; ++i)
    for (int j = V; j < Vp; ++j) logits[i * Vp + j] = 1e3;
  const Vec R = randn(N, 17);
  Vec losses(N), work(N * Vp);
  auto loss = [&] {
    work = logits;
    softmax_crossentropy(losses.data(), work.data(), tgt.data(), N, V, Vp, 0.0, false);
    return dot(losses, R);
  };
  const double l0 = loss();
  CHECK(std::isfinite(l0));
  for (double li : losses) CHECK(li > 0);
  // The op's gradient is dloss * d(sum losses)/dlogits; weight rows via separate calls.
  Vec grad(N * Vp);
  for (int i = 0; i < N; ++i) {
    Vec row(logits.begin() + i * Vp, logits.begin() + (i + 1) * Vp);
    double li;
    softmax_crossentropy(&li, row.data(), &tgt[i], 1, V, Vp, R[i], true);
    std::copy(row.begin(), row.end(), grad.begin() + i * Vp);
    for (int j = V; j < Vp; ++j) CHECK(row[j] == 0.0);
  }
  fd_check("dlogits", logits, grad, loss);
}

TEST_CASE("vocab-parallel cross-entropy over 1, 2 and 3 slices equals the fused op") {
  // The padded vocabulary (V = 11 real of Vp = 18) cut into equal slices, some of them holding
  // padding only; the reductions the tp group would do (max, then sum) are done here by hand.
  const int N = 5, V = 11, Vp = 18;
  Vec logits = randn(N * Vp, 30, 3.0);
  std::vector<int32_t> tgt = {0, 10, 5, 6, 2};
  Vec fused_loss(N), fused_grad = logits;
  softmax_crossentropy(fused_loss.data(), fused_grad.data(), tgt.data(), N, V, Vp, 0.5, true);
  for (int parts : {1, 2, 3}) {
    const int Vl = Vp / parts;
    std::vector<Vec> slice(size_t(parts), Vec(size_t(N) * Vl));
    for (int p = 0; p < parts; ++p)
      for (int i = 0; i < N; ++i)
        for (int j = 0; j < Vl; ++j) slice[size_t(p)][size_t(i) * Vl + j] = logits[size_t(i) * Vp + p * Vl + j];
    auto v_real = [&](int p) { return std::clamp(V - p * Vl, 0, Vl); };
    Vec mx(N, -INFINITY), part(2 * N, 0.0), m(N), pr(2 * N);
    for (int p = 0; p < parts; ++p) {
      crossentropy_max(m.data(), slice[size_t(p)].data(), N, Vl, v_real(p));
      for (int i = 0; i < N; ++i) mx[i] = std::max(mx[i], m[i]);
    }
    for (int p = 0; p < parts; ++p) {
      crossentropy_partials(pr.data(), slice[size_t(p)].data(), mx.data(), tgt.data(), N, Vl, v_real(p), p * Vl);
      for (int i = 0; i < 2 * N; ++i) part[i] += pr[i];
    }
    for (int p = 0; p < parts; ++p) {
      Vec loss(N);
      crossentropy_finish(loss.data(), slice[size_t(p)].data(), mx.data(), part.data(), tgt.data(), N, Vl, v_real(p),
                          p * Vl, 0.5, true);
      for (int i = 0; i < N; ++i) {
        CHECK(loss[i] == Approx(fused_loss[i]).epsilon(1e-12));
        for (int j = 0; j < Vl; ++j)
          CHECK(slice[size_t(p)][size_t(i) * Vl + j] ==
                Approx(fused_grad[size_t(i) * Vp + p * Vl + j]).epsilon(1e-12).margin(1e-15));
      }
    }
  }
}

TEST_CASE("AdamW matches PyTorch's update written out by hand") {
  // torch.optim.AdamW: p *= 1 - lr*wd; m, v updated; p -= lr/bc1 * m / (sqrt(v)/sqrt(bc2) + eps).
  const double lr = 1e-2, b1 = 0.9, b2 = 0.95, eps = 1e-8, wd = 0.1;
  Vec p = {0.5, -1.0, 2.0}, g = {0.1, -0.2, 0.0}, m = {0.01, 0.0, -0.3}, v = {0.001, 0.0, 0.02};
  const int64_t t = 3;
  Vec ep = p, em = m, ev = v;
  for (int i = 0; i < 3; ++i) {
    em[i] = b1 * em[i] + (1 - b1) * g[i];
    ev[i] = b2 * ev[i] + (1 - b2) * g[i] * g[i];
    const double bc1 = 1 - std::pow(b1, t), bc2 = 1 - std::pow(b2, t);
    ep[i] = ep[i] * (1 - lr * wd) - lr / bc1 * em[i] / (std::sqrt(ev[i]) / std::sqrt(bc2) + eps);
  }
  adamw_update<double>(p.data(), g.data(), m.data(), v.data(), 3, lr, b1, b2, eps, wd, t);
  for (int i = 0; i < 3; ++i) {
    CHECK(p[i] == Approx(ep[i]).epsilon(1e-14));
    CHECK(m[i] == Approx(em[i]).epsilon(1e-14));
    CHECK(v[i] == Approx(ev[i]).epsilon(1e-14));
  }
}

TEST_CASE("reductions are exact on integers and identical for any thread count") {
  const size_t n = 300001;  // several 64K chunks and a ragged tail
  std::vector<float> x(n);
  for (size_t i = 0; i < n; ++i) x[i] = float(int(i % 7) - 3);
  double exact_sq = 0, exact = 0;
  for (float v : x) exact_sq += double(v) * v, exact += v;
  CHECK(sum_squares<float>(x.data(), n) == exact_sq);
  CHECK(sum<float>(x.data(), n) == exact);
  std::vector<float> y = x;
  for (size_t i = 0; i < n; ++i) y[i] = float(std::sin(double(i))) * 1e-3f;
  const int saved = omp_get_max_threads();
  omp_set_num_threads(1);
  const double one = sum_squares<float>(y.data(), n);
  omp_set_num_threads(2);
  const double two = sum_squares<float>(y.data(), n);
  omp_set_num_threads(saved);
  CHECK(one == two);
  CHECK(sum_squares<float>(x.data(), 0) == 0.0);
}

TEST_CASE("the float ops agree with the double ops") {
  // fp32 against fp64 on the same inputs: relative error of a length-C dot product in fp32 is
  // ~sqrt(C) * 6e-8; 1e-5 relative to the largest output leaves a wide margin.
  const int B = 2, T = 9, C = 24, NH = 4, N = B * T, OC = 40;
  Vec x = randn(N * 3 * C, 20), w = randn(OC * C, 21), b = randn(OC, 22);
  std::vector<float> xf(x.begin(), x.end()), wf(w.begin(), w.end()), bf(b.begin(), b.end());
  Vec outd(N * OC);
  std::vector<float> outf(N * OC);
  matmul_forward(outd.data(), x.data(), w.data(), b.data(), N, C, OC);
  matmul_forward(outf.data(), xf.data(), wf.data(), bf.data(), N, C, OC);
  double scale = 0;
  for (double v : outd) scale = std::max(scale, std::fabs(v));
  for (int i = 0; i < N * OC; ++i) CHECK(std::fabs(outf[i] - outd[i]) <= 1e-5 * scale);

  Vec attd(B * NH * T * T), od(N * C);
  std::vector<float> attf(attd.size()), of(od.size());
  attention_forward(od.data(), attd.data(), x.data(), B, T, C, NH);
  attention_forward(of.data(), attf.data(), xf.data(), B, T, C, NH);
  for (size_t i = 0; i < od.size(); ++i) CHECK(of[i] == Approx(od[i]).margin(1e-5));
}
