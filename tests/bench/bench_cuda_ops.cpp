// Time per op of the CUDA backend on GPT-2-124M shapes (B 8, T 1024, C 768, 12 heads, vocab
// 50304), with the achieved memory bandwidth (memory-bound ops) or FLOP rate (matmul,
// attention). Run it next to scripts/torch_ops_bench.py (the same ops in PyTorch on the same
// GPU) to compare:
//   build/tests/bench_cuda_ops && python3 scripts/torch_ops_bench.py
// fp32 first; then the matmul and attention again with bf16 tensors (fp32 accumulation, fp32 dW),
// against the device's dense bf16 peak (Backend::peak_flops) with the ratio. The H100's limits
// for reference: ~3.35 TB/s HBM3, ~67 TFLOP/s fp32 (non-tensor-core), ~990 bf16 dense TFLOP/s.
#include <chrono>
#include <cstdio>
#include <functional>
#include <vector>

#include "kernels/backend.hpp"
#include "kernels/cuda/cuda_backend.hpp"
#include "kernels/cuda/cuda_probe.hpp"

using namespace loom;

namespace {

double time_ms(Backend& be, const std::function<void()>& op, int reps = 20) {
  op();  // warm-up (and cuBLASLt heuristics)
  be.synchronize();
  const auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < reps; ++i) op();
  be.synchronize();
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count() / reps;
}

void row(const char* op, const char* shape, double ms, double bytes, double flops) {
  std::printf("%-28s %-28s %9.3f ms", op, shape, ms);
  if (bytes > 0) std::printf(" %9.1f GB/s", bytes / ms / 1e6);
  if (flops > 0) std::printf(" %9.2f TFLOP/s", flops / ms / 1e9);
  std::printf("\n");
}

// A bf16 row: the FLOP rate, the limit it is measured against and the ratio.
void row_peak(const char* op, const char* shape, double ms, double flops, double peak) {
  const double rate = flops / ms / 1e9;
  std::printf("%-28s %-28s %9.3f ms %9.2f TFLOP/s of %7.1f (%5.1f%%)\n", op, shape, ms, rate, peak / 1e12,
              100.0 * rate * 1e12 / peak);
}

}  // namespace

int main() {
  const cuda::DeviceProbe probe = cuda::probe_devices();
  if (probe.count == 0) {
    std::printf("bench_cuda_ops: no usable CUDA device (%s)\n", probe.reason.c_str());
    return 77;
  }
  std::printf("device: %s\n", probe.names.c_str());
  auto be = make_cuda_backend(0);
  Backend& g = *be;
  const int B = 8, T = 1024, C = 768, NH = 12, V = 50257, Vp = 50304, N = B * T;
  const size_t NC = size_t(N) * C;
  float* x = g.alloc(NC);
  float* y = g.alloc(NC);
  float* big = g.alloc(size_t(N) * 4 * C);
  float* big2 = g.alloc(size_t(N) * 4 * C);
  float* w = g.alloc(size_t(4) * C * C);
  float* dw = g.alloc(size_t(4) * C * C);
  float* bias = g.alloc(size_t(4) * C);
  float* mean = g.alloc(size_t(N));
  float* rstd = g.alloc(size_t(N));
  float* qkv = g.alloc(size_t(N) * 3 * C);
  float* dqkv = g.alloc(size_t(N) * 3 * C);
  float* saved = g.alloc(g.attention_saved_bytes(B, T, NH, loom::DType::f32) / sizeof(float));
  float* logits = g.alloc(size_t(N) * Vp);
  float* losses = g.alloc(size_t(N));
  int32_t* targets = g.alloc_i32(size_t(N));
  std::vector<float> host(size_t(N) * 3 * C);
  for (size_t i = 0; i < host.size(); ++i) host[i] = float((i * 2654435761u) % 1000) / 1000.0f - 0.5f;
  g.upload(qkv, host.data(), host.size());
  g.upload(x, host.data(), NC);
  // Weights and biases of the same values, not whatever the allocation held (zeros, as a rule:
  // tensor cores multiplying zeros draw less power and can run faster than on real data).
  g.upload(w, host.data() + NC, size_t(4) * C * C);
  g.upload(bias, host.data() + NC + size_t(4) * C * C, size_t(4) * C);
  std::vector<int32_t> tg(static_cast<size_t>(N));
  for (int i = 0; i < N; ++i) tg[size_t(i)] = (i * 7919) % V;
  g.upload_i32(targets, tg.data(), tg.size());

  std::printf("%-28s %-28s %12s %14s\n", "op", "shape", "time", "rate");
  row("layernorm_forward", "N 8192 x C 768",
      time_ms(g, [&] { g.layernorm_forward(y, mean, rstd, x, w, bias, N, C); }), 2.0 * NC * 4, 0);
  row("layernorm_backward", "N 8192 x C 768",
      time_ms(g, [&] { g.layernorm_backward(y, dw, bias, x, x, w, mean, rstd, N, C); }), 4.0 * NC * 4, 0);
  row("gelu_forward", "N 8192 x 4C",
      time_ms(g, [&] { g.gelu_forward(big2, big, size_t(N) * 4 * C); }), 2.0 * N * 4 * C * 4, 0);
  row("gelu_backward", "N 8192 x 4C",
      time_ms(g, [&] { g.gelu_backward(big2, big, big2, size_t(N) * 4 * C); }), 3.0 * N * 4 * C * 4, 0);
  row("residual_forward", "N 8192 x C 768", time_ms(g, [&] { g.residual_forward(y, x, y, NC); }), 3.0 * NC * 4, 0);
  row("matmul_forward (fc)", "8192x768 @ 768x3072 +bias",
      time_ms(g, [&] { g.matmul_forward(big, x, w, bias, N, C, 4 * C); }), 0, 2.0 * N * C * 4 * C);
  row("matmul_backward (fc)", "dinp, dW, dbias",
      time_ms(g, [&] { g.matmul_backward(x, dw, bias, big, x, w, N, C, 4 * C); }), 0, 4.0 * N * C * 4 * C);
  const double attn_flops = 4.0 * B * NH * double(T) * T * (C / NH) / 2;  // causal: half the square
  row("attention_forward", "B 8, NH 12, T 1024, hs 64",
      time_ms(g, [&] { g.attention_forward(y, saved, qkv, B, T, C, NH); }), 0, attn_flops);
  row("attention_backward", "B 8, NH 12, T 1024, hs 64",
      time_ms(g, [&] { g.attention_backward(dqkv, x, qkv, y, saved, B, T, C, NH); }), 0, 2.5 * attn_flops);
  {
    const DType bf = DType::bf16;
    const TypedPtr xb = g.alloc(bf, NC), yb = g.alloc(bf, NC), bigb = g.alloc(bf, size_t(N) * 4 * C),
                   wb = g.alloc(bf, size_t(4) * C * C), biasb = g.alloc(bf, size_t(4) * C),
                   qkvb = g.alloc(bf, size_t(N) * 3 * C), dqkvb = g.alloc(bf, size_t(N) * 3 * C);
    g.convert(qkvb, qkv, size_t(N) * 3 * C);
    g.convert(xb, x, NC);
    g.convert(wb, w, size_t(4) * C * C);
    g.convert(biasb, bias, size_t(4) * C);
    const double peak = g.peak_flops(bf);
    row_peak("bf16 matmul_forward (fc)", "8192x768 @ 768x3072 +bias",
             time_ms(g, [&] { g.matmul_forward(bigb, xb, wb, biasb, N, C, 4 * C); }), 2.0 * N * C * 4 * C, peak);
    row_peak("bf16 matmul_backward (fc)", "dinp bf16, dW/dbias fp32",
             time_ms(g, [&] { g.matmul_backward(xb, dw, bias, bigb, xb, wb, N, C, 4 * C); }), 4.0 * N * C * 4 * C,
             peak);
    // The MLP's fc + GELU and its backward through the GELU (cuBLASLt's GELU epilogues; the
    // fc's output doubles as the pre-activation here, only the time matters).
    const TypedPtr preb = g.alloc(bf, size_t(N) * 4 * C), dbigb = g.alloc(bf, size_t(N) * 4 * C);
    row_peak("bf16 matmul_gelu_forward (fc)", "8192x768 @ 768x3072 +bias, gelu",
             time_ms(g, [&] { g.matmul_gelu_forward(bigb, preb, xb, wb, biasb, N, C, 4 * C); }),
             2.0 * N * C * 4 * C, peak);
    row_peak("bf16 matmul_backward_gelu", "proj: dinp 8192x3072 * gelu'",
             time_ms(g, [&] { g.matmul_backward_gelu(dbigb, dw, bias, xb, bigb, wb, preb, N, 4 * C, C); }),
             4.0 * N * C * 4 * C, peak);
    // LayerNorm's backward as the model calls it (dw, db accumulated) and its input gradient
    // alone: in a profiled GPT-2 step (bench_gpt_training --profile 1, N 16384) it took 0.51 ms a
    // call against 0.065 ms for fp32 at N 8192 above; these rows tell the two kernels apart.
    row("bf16 layernorm_backward", "N 8192 x C 768, dw/db",
        time_ms(g, [&] { g.layernorm_backward(yb, dw, bias, xb, xb, wb, mean, rstd, N, C); }), 4.0 * NC * 2, 0);
    row("bf16 layernorm_backward", "N 8192 x C 768, dinp only",
        time_ms(g, [&] { g.layernorm_backward(yb, nullptr, nullptr, xb, xb, wb, mean, rstd, N, C); }),
        4.0 * NC * 2, 0);
    // The same rows read one tensor as both dout and inp, 12.6 MB that stay in the 50 MB L2. The
    // step's call has N 16384 and three distinct tensors from DRAM: here four sets of them (300
    // MB) taken in turn, on both kernel sets (cuda_backend.hpp: rows is the default; vector has
    // 16-byte accesses and more loads in flight). Bytes: dinp read and written, dout and inp read
    // by each of the two kernels (the input gradient alone: 4 tensors' worth).
    {
      const int N2 = 2 * N;
      const size_t NC2 = size_t(N2) * C;
      struct Set { TypedPtr dinp, dout, inp; float *mean, *rstd; };
      std::vector<Set> sets(4);
      for (Set& st : sets) {
        st = {g.alloc(bf, NC2), g.alloc(bf, NC2), g.alloc(bf, NC2), g.alloc(size_t(N2)), g.alloc(size_t(N2))};
        for (const TypedPtr& t : {st.dinp, st.dout, st.inp}) g.convert(t, qkv, NC2);  // N x 3C >= N2 x C
        g.upload(st.mean, host.data(), size_t(N2));
        g.upload(st.rstd, host.data() + N2, size_t(N2));
      }
      size_t turn = 0;
      const cuda::LayerNormBackwardKernels start = cuda::layernorm_backward_kernels();
      for (auto kernels : {cuda::LayerNormBackwardKernels::rows, cuda::LayerNormBackwardKernels::vector}) {
        cuda::set_layernorm_backward_kernels(kernels);
        const bool vector = kernels == cuda::LayerNormBackwardKernels::vector;
        for (bool with_dw : {true, false}) {
          const double ms = time_ms(g, [&] {
            const Set& st = sets[turn++ % sets.size()];
            g.layernorm_backward(st.dinp, with_dw ? dw : nullptr, with_dw ? bias : nullptr, st.dout, st.inp, wb,
                                 st.mean, st.rstd, N2, C);
          });
          row(vector ? "bf16 layernorm_backward vector" : "bf16 layernorm_backward rows",
              with_dw ? "N 16384 x C 768 cold, dw/db" : "N 16384 x C 768 cold, dinp", ms,
              (with_dw ? 6.0 : 4.0) * NC2 * 2, 0);
        }
      }
      cuda::set_layernorm_backward_kernels(start);
      for (const Set& st : sets)
        for (void* p : {st.dinp.data, st.dout.data, st.inp.data, static_cast<void*>(st.mean), static_cast<void*>(st.rstd)})
          g.release(p);
    }
    row_peak("bf16 attention_forward", "B 8, NH 12, T 1024, hs 64",
             time_ms(g, [&] { g.attention_forward(yb, saved, qkvb, B, T, C, NH); }), attn_flops, peak);
    row_peak("bf16 attention_backward", "B 8, NH 12, T 1024, hs 64",
             time_ms(g, [&] { g.attention_backward(dqkvb, xb, qkvb, yb, saved, B, T, C, NH); }), 2.5 * attn_flops,
             peak);
    const TypedPtr logitsb = g.alloc(bf, size_t(N) * Vp);
    g.convert(logitsb, logits, size_t(N) * Vp);
    row("bf16 softmax_crossentropy+grad", "N 8192 x Vp 50304",
        time_ms(g, [&] { g.softmax_crossentropy(losses, logitsb, targets, N, V, Vp, 1.0f / N, true); }, 5),
        3.0 * N * double(Vp) * 2, 0);
    for (const TypedPtr& t : {xb, yb, bigb, wb, biasb, qkvb, dqkvb, logitsb, preb, dbigb}) g.release(t.data);
  }
  row("softmax_crossentropy+grad", "N 8192 x Vp 50304",
      time_ms(g, [&] { g.softmax_crossentropy(losses, logits, targets, N, V, Vp, 1.0f / N, true); }, 5),
      3.0 * N * double(Vp) * 4, 0);
  const size_t P = 124000000;
  float* p = g.alloc(P);
  float* pg = g.alloc(P);
  float* pm = g.alloc(P);
  float* pv = g.alloc(P);
  row("adamw_update", "124M parameters",
      time_ms(g, [&] { g.adamw_update(p, pg, pm, pv, P, 1e-4f, 0.9f, 0.95f, 1e-8f, 0.1f, 10); }, 5), 7.0 * P * 4, 0);
  row("sum_squares (grad norm)", "124M floats", time_ms(g, [&] { g.sum_squares(pg, P); }, 5), 1.0 * P * 4, 0);
  return 0;
}
