// loom_bench_cpu_matmul: the CPU backend's matrix products at a model's shapes, side by side in
// one run (this machine's rates drift with its neighbours): fp32 OpenBLAS (the reference), fp32
// oneDNN, bf16 oneDNN and bf16 widened to fp32 (LOOM_CPU_MATMUL=reference). For each linear layer
// (N, C) -> (N, OC): the forward, backward's dinp = dout @ W and dW += dout^T @ inp.
//   loom_bench_cpu_matmul [N] [reps]       defaults: 2048 5; shapes of GPT-2 at C = 384.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <vector>

#include "kernels/cpu/cpu_ops.hpp"
#include "kernels/cpu/eigen_maps.hpp"
#include "kernels/cpu/onednn_gemm.hpp"

using namespace loom;
using namespace loom::cpu;

namespace {

double best_seconds(int reps, const std::function<void()>& f) {
  f();  // warm-up: primitive creation, page faults
  double best = 1e30;
  for (int r = 0; r < reps; ++r) {
    auto t0 = std::chrono::steady_clock::now();
    f();
    best = std::min(best, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  return best;
}

template <typename T>
std::vector<T> random(size_t n, unsigned seed) {
  std::vector<T> v(n);
  for (auto& x : v) {
    seed = seed * 1664525u + 1013904223u;
    x = T(float(seed >> 8) / float(1 << 24) - 0.5f);
  }
  return v;
}

}  // namespace

int main(int argc, char** argv) {
  const int N = argc > 1 ? std::atoi(argv[1]) : 2048, reps = argc > 2 ? std::atoi(argv[2]) : 5;
  struct Shape {
    const char* name;
    int C, OC;
  };
  const Shape shapes[] = {{"attn.qkv", 384, 1152}, {"attn.proj", 384, 384}, {"mlp.fc", 384, 1536},
                          {"mlp.proj", 1536, 384}, {"lm_head", 384, 320}};
  std::printf("GFLOP/s, best of %d; N=%d. columns: fp32 OpenBLAS | fp32 oneDNN | bf16 oneDNN | bf16 widened+sgemm\n",
              reps, N);
  for (const Shape& s : shapes) {
    const int C = s.C, OC = s.OC;
    auto x = random<float>(size_t(N) * C, 1), w = random<float>(size_t(OC) * C, 2), d = random<float>(size_t(N) * OC, 3);
    std::vector<float> y(size_t(N) * OC), dx(size_t(N) * C), dw(size_t(OC) * C);
    std::vector<bf16> xb(x.size()), wb(w.size()), db(d.size()), yb(y.size()), dxb(dx.size());
    for (size_t i = 0; i < x.size(); ++i) xb[i] = bf16(x[i]);
    for (size_t i = 0; i < w.size(); ++i) wb[i] = bf16(w[i]);
    for (size_t i = 0; i < d.size(); ++i) db[i] = bf16(d[i]);
    const double flops = 2.0 * N * C * OC;
    onednn::GemmDesc fwd{DType::f32, DType::f32, N, C, OC, false, true, false, false};
    onednn::GemmDesc bdx{DType::f32, DType::f32, N, OC, C, false, false, false, false};
    onednn::GemmDesc bdw{DType::f32, DType::f32, OC, N, C, true, false, false, true};
    auto row = [&](const char* what, const std::function<void()>& blas, onednn::GemmDesc g,
                   const std::function<void()>& dn32, const std::function<void()>& dn16,
                   const std::function<void()>& ref16) {
      const bool dn = onednn::built();  // without oneDNN its columns read 0
      const double a = flops / best_seconds(reps, blas) / 1e9;
      const double b = dn ? flops / best_seconds(reps, dn32) / 1e9 : 0;
      const double c = dn ? flops / best_seconds(reps, dn16) / 1e9 : 0;
      setenv("LOOM_CPU_MATMUL", "reference", 1);
      const double e = flops / best_seconds(reps, ref16) / 1e9;
      unsetenv("LOOM_CPU_MATMUL");
      g.in = DType::bf16;
      if (g.out != DType::f32 || !g.accumulate) g.out = DType::bf16;
      std::printf("%-9s C=%4d OC=%4d %-5s %7.1f | %7.1f | %7.1f | %7.1f   (%s)\n", s.name, C, OC, what, a, b, c, e,
                  onednn::impl_name(g).c_str());
    };
    row(
        "fwd", [&] { matmul_forward<float>(y.data(), x.data(), w.data(), nullptr, N, C, OC); }, fwd,
        [&] { onednn::gemm(fwd, y.data(), x.data(), w.data(), nullptr); },
        [&] { matmul_forward<bf16>(yb.data(), xb.data(), wb.data(), nullptr, N, C, OC); },
        [&] { matmul_forward<bf16>(yb.data(), xb.data(), wb.data(), nullptr, N, C, OC); });
    row(
        "dinp",
        [&] { MatMap<float>(dx.data(), N, C).noalias() = ConstMatMap<float>(d.data(), N, OC) * ConstMatMap<float>(w.data(), OC, C); },
        bdx, [&] { onednn::gemm(bdx, dx.data(), d.data(), w.data(), nullptr); },
        [&] {
          onednn::GemmDesc g = bdx;
          g.in = g.out = DType::bf16;
          onednn::gemm(g, dxb.data(), db.data(), wb.data(), nullptr);
        },
        [&] { matmul_backward<bf16>(dxb.data(), dw.data(), nullptr, db.data(), xb.data(), wb.data(), N, C, OC); });
    row(
        "dW",
        [&] { MatMap<float>(dw.data(), OC, C).noalias() += ConstMatMap<float>(d.data(), N, OC).transpose() * ConstMatMap<float>(x.data(), N, C); },
        bdw, [&] { onednn::gemm(bdw, dw.data(), d.data(), x.data(), nullptr); },
        [&] {
          onednn::GemmDesc g = bdw;
          g.in = DType::bf16;
          onednn::gemm(g, dw.data(), db.data(), xb.data(), nullptr);
        },
        [&] { matmul_backward<bf16>(nullptr, dw.data(), nullptr, db.data(), xb.data(), wb.data(), N, C, OC); });
  }
  std::printf("(the last column's dinp runs the whole widened backward, dinp and dW: its figure counts one product)\n");
  return 0;
}
