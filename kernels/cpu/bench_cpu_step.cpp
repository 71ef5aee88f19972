// loom_bench_cpu_step: the ops of one GPT-2 training step (forward and backward, no optimizer)
// through the CPU backend at fp32 and at bf16, timed op by op, side by side in one run: where the
// time goes and the step's bf16/fp32 ratio before the engine runs bf16 itself.
//   loom_bench_cpu_step [B T C NH L V reps]   defaults: 8 256 384 6 6 257 3 (configs/bench-cpu.yaml)
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "kernels/backend.hpp"

using namespace loom;

namespace {

struct Timer {
  std::map<std::string, double> total;
  void run(const std::string& name, int times, const std::function<void()>& f) {
    auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < times; ++i) f();
    total[name] += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  }
};

// One step's ops at `dt` (all buffers from the backend, random where read); returns per-op seconds.
std::map<std::string, double> step(Backend& be, DType dt, int B, int T, int C, int NH, int L, int V, int reps) {
  const int N = B * T, Vp = (V + 63) / 64 * 64;
  auto act = [&](size_t n) {
    TypedPtr p = be.alloc(dt, n);
    std::vector<float> h(n);
    for (size_t i = 0; i < n; ++i) h[i] = float((i * 2654435761u) % 1000) / 1000.f - 0.5f;
    TypedPtr f = be.alloc(DType::f32, n);
    be.upload(static_cast<float*>(f.data), h.data(), n);
    be.convert(p, f, n);
    be.release(f.data);
    return p;
  };
  TypedPtr x = act(size_t(N) * C), ln = act(size_t(N) * C), qkv = act(size_t(N) * 3 * C), att_out = act(size_t(N) * C);
  TypedPtr h = act(size_t(N) * 4 * C), hg = act(size_t(N) * 4 * C), y = act(size_t(N) * C), logits = act(size_t(N) * Vp);
  TypedPtr wqkv = act(size_t(3) * C * C), wproj = act(size_t(C) * C), wfc = act(size_t(4) * C * C), wfp = act(size_t(4) * C * C);
  TypedPtr bias4 = act(4 * C), lnw = act(C), lnb = act(C), wte = act(size_t(Vp) * C), wpe = act(size_t(T) * C);
  TypedPtr d1 = act(size_t(N) * C), d2 = act(size_t(N) * C), d3 = act(size_t(N) * 3 * C), d4 = act(size_t(N) * 4 * C);
  void* saved = be.alloc_bytes(be.attention_saved_bytes(B, T, NH, dt));
  float* mean = be.alloc(N);
  float* rstd = be.alloc(N);
  float* losses = be.alloc(N);
  float* gw = be.alloc(size_t(Vp) * C > size_t(4) * C * C ? size_t(Vp) * C : size_t(4) * C * C);
  float* gb = be.alloc(4 * C);
  std::vector<int32_t> tok_h(N);
  for (int i = 0; i < N; ++i) tok_h[i] = (i * 7) % V;
  int32_t* tok = be.alloc_i32(N);
  be.upload_i32(tok, tok_h.data(), N);
  Timer t;
  for (int r = 0; r < reps + 1; ++r) {
    if (r == 1) t.total.clear();  // the first step warms up (primitives, scratch, page faults)
    t.run("encoder_forward", 1, [&] { be.encoder_forward(x, tok, wte, wpe, B, T, C, 0, Vp); });
    t.run("layernorm_forward", L, [&] { be.layernorm_forward(ln, mean, rstd, x, lnw, lnb, N, C); });
    t.run("matmul_forward", L, [&] { be.matmul_forward(qkv, ln, wqkv, bias4, N, C, 3 * C); });
    t.run("attention_forward", L, [&] { be.attention_forward(att_out, saved, qkv, B, T, C, NH); });
    t.run("matmul_forward", L, [&] { be.matmul_forward(y, att_out, wproj, bias4, N, C, C); });
    t.run("residual_forward", 2 * L, [&] { be.residual_forward(x, x, y, size_t(N) * C); });
    t.run("layernorm_forward", L, [&] { be.layernorm_forward(ln, mean, rstd, x, lnw, lnb, N, C); });
    t.run("matmul_forward", L, [&] { be.matmul_forward(h, ln, wfc, bias4, N, C, 4 * C); });
    t.run("gelu_forward", L, [&] { be.gelu_forward(hg, h, size_t(N) * 4 * C); });
    t.run("matmul_forward", L, [&] { be.matmul_forward(y, hg, wfp, bias4, N, 4 * C, C); });
    t.run("layernorm_forward", 1, [&] { be.layernorm_forward(ln, mean, rstd, x, lnw, lnb, N, C); });
    t.run("matmul_forward", 1, [&] { be.matmul_forward(logits, ln, wte, nullptr, N, C, Vp); });
    t.run("softmax_crossentropy", 1, [&] { be.softmax_crossentropy(losses, logits, tok, N, V, Vp, 1.f / N, true); });
    t.run("matmul_backward", 1, [&] { be.matmul_backward(d1, gw, nullptr, logits, ln, wte, N, C, Vp); });
    t.run("layernorm_backward", 1, [&] { be.layernorm_backward(d2, gb, gb, d1, x, lnw, mean, rstd, N, C); });
    t.run("matmul_backward", L, [&] { be.matmul_backward(d4, gw, gb, d1, hg, wfp, N, 4 * C, C); });
    t.run("gelu_backward", L, [&] { be.gelu_backward(d4, h, d4, size_t(N) * 4 * C); });
    t.run("matmul_backward", L, [&] { be.matmul_backward(d1, gw, gb, d4, ln, wfc, N, C, 4 * C); });
    t.run("layernorm_backward", 2 * L, [&] { be.layernorm_backward(d2, gb, gb, d1, x, lnw, mean, rstd, N, C); });
    t.run("matmul_backward", L, [&] { be.matmul_backward(d1, gw, gb, d2, att_out, wproj, N, C, C); });
    t.run("attention_backward", L, [&] { be.attention_backward(d3, d1, qkv, att_out, saved, B, T, C, NH); });
    t.run("matmul_backward", L, [&] { be.matmul_backward(d1, gw, gb, d3, ln, wqkv, N, C, 3 * C); });
    t.run("encoder_backward", 1, [&] { be.encoder_backward(gw, nullptr, d1, tok, B, T, C, 0, Vp); });
  }
  for (auto& [k, v] : t.total) v /= reps;
  return t.total;
}

}  // namespace

int main(int argc, char** argv) {
  int a[7] = {8, 256, 384, 6, 6, 257, 3};
  for (int i = 1; i < argc && i <= 7; ++i) a[i - 1] = std::atoi(argv[i]);
  auto be = make_cpu_backend();
  auto f32 = step(*be, DType::f32, a[0], a[1], a[2], a[3], a[4], a[5], a[6]);
  auto b16 = step(*be, DType::bf16, a[0], a[1], a[2], a[3], a[4], a[5], a[6]);
  double s32 = 0, s16 = 0;
  std::printf("B=%d T=%d C=%d NH=%d L=%d V=%d, ms per step (forward + backward, no optimizer)\n", a[0], a[1], a[2],
              a[3], a[4], a[5]);
  std::printf("%-22s %9s %9s %7s\n", "op", "fp32", "bf16", "ratio");
  for (auto& [k, v] : f32) {
    std::printf("%-22s %9.2f %9.2f %7.2f\n", k.c_str(), v * 1e3, b16[k] * 1e3, v / b16[k]);
    s32 += v, s16 += b16[k];
  }
  const double tokens = double(a[0]) * a[1];
  std::printf("%-22s %9.2f %9.2f %7.2f   (%.0f vs %.0f tokens/s)\n", "total", s32 * 1e3, s16 * 1e3, s32 / s16,
              tokens / s32, tokens / s16);
  return 0;
}
