// The CPU reference backend: host memory, the templated ops of cpu_ops.hpp at float, and a
// measured sgemm rate as the MFU denominator.
#include <omp.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <algorithm>
#include <new>
#include <vector>

#include "kernels/backend.hpp"
#include "kernels/cpu/cpu_ops.hpp"
#include "kernels/cpu/eigen_maps.hpp"

namespace loom {
namespace {

constexpr size_t kAlign = 64;  // cache line; also what AVX-512 loads like

void* aligned_zeroed(size_t bytes) {
  bytes = (bytes + kAlign - 1) / kAlign * kAlign;
  if (bytes == 0) bytes = kAlign;
  void* p = std::aligned_alloc(kAlign, bytes);
  if (!p) throw std::bad_alloc();
  std::memset(p, 0, bytes);
  return p;
}

class CpuBackend final : public Backend {
 public:
  std::string name() const override { return "cpu"; }

  double peak_flops() override {
    if (peak_ == 0) peak_ = measure_sgemm_flops(1536, 5);
    return peak_;
  }

  float* alloc(size_t n) override { return static_cast<float*>(aligned_zeroed(n * sizeof(float))); }
  int32_t* alloc_i32(size_t n) override { return static_cast<int32_t*>(aligned_zeroed(n * sizeof(int32_t))); }
  void release(void* p) override { std::free(p); }
  void upload(float* dst, const float* src, size_t n) override { std::memcpy(dst, src, n * sizeof(float)); }
  void upload_i32(int32_t* dst, const int32_t* src, size_t n) override {
    std::memcpy(dst, src, n * sizeof(int32_t));
  }
  void download(float* dst, const float* src, size_t n) override { std::memcpy(dst, src, n * sizeof(float)); }
  void zero(float* p, size_t n) override {
#pragma omp parallel for schedule(static)
    for (size_t i = 0; i < n; ++i) p[i] = 0.0f;
  }

  void encoder_forward(float* out, const int32_t* tokens, const float* wte, const float* wpe, int B, int T, int C,
                       int vocab_start, int vocab_rows) override {
    cpu::encoder_forward(out, tokens, wte, wpe, B, T, C, vocab_start, vocab_rows);
  }
  void encoder_backward(float* dwte, float* dwpe, const float* dout, const int32_t* tokens, int B, int T, int C,
                        int vocab_start, int vocab_rows) override {
    cpu::encoder_backward(dwte, dwpe, dout, tokens, B, T, C, vocab_start, vocab_rows);
  }
  void layernorm_forward(float* out, float* mean, float* rstd, const float* inp, const float* w, const float* b,
                         int N, int C) override {
    cpu::layernorm_forward(out, mean, rstd, inp, w, b, N, C);
  }
  void layernorm_backward(float* dinp, float* dw, float* db, const float* dout, const float* inp, const float* w,
                          const float* mean, const float* rstd, int N, int C) override {
    cpu::layernorm_backward(dinp, dw, db, dout, inp, w, mean, rstd, N, C);
  }
  void matmul_forward(float* out, const float* inp, const float* w, const float* bias, int N, int C,
                      int OC) override {
    cpu::matmul_forward(out, inp, w, bias, N, C, OC);
  }
  void matmul_backward(float* dinp, float* dw, float* dbias, const float* dout, const float* inp, const float* w,
                       int N, int C, int OC) override {
    cpu::matmul_backward(dinp, dw, dbias, dout, inp, w, N, C, OC);
  }
  size_t attention_saved_floats(int B, int T, int NH) const override {
    return static_cast<size_t>(B) * NH * T * T;  // the softmax probabilities
  }
  void attention_forward(float* out, float* saved, const float* qkv, int B, int T, int C, int NH) override {
    cpu::attention_forward(out, saved, qkv, B, T, C, NH);
  }
  void attention_backward(float* dqkv, const float* dout, const float* qkv, const float* /*out*/,
                          const float* saved, int B, int T, int C, int NH) override {
    cpu::attention_backward(dqkv, dout, qkv, saved, B, T, C, NH);
  }
  void gelu_forward(float* out, const float* inp, size_t n) override { cpu::gelu_forward(out, inp, n); }
  void gelu_backward(float* dinp, const float* inp, const float* dout, size_t n) override {
    cpu::gelu_backward(dinp, inp, dout, n);
  }
  void residual_forward(float* out, const float* a, const float* b, size_t n) override {
#pragma omp parallel for simd schedule(static)
    for (size_t i = 0; i < n; ++i) out[i] = a[i] + b[i];
  }
  void softmax_crossentropy(float* losses, float* logits, const int32_t* targets, int N, int V, int Vp, float dloss,
                            bool write_grad) override {
    cpu::softmax_crossentropy(losses, logits, targets, N, V, Vp, dloss, write_grad);
  }
  void crossentropy_max(float* maxes, const float* logits, int N, int Vl, int v_real) override {
    cpu::crossentropy_max(maxes, logits, N, Vl, v_real);
  }
  void crossentropy_partials(float* partials, const float* logits, const float* maxes, const int32_t* targets, int N,
                             int Vl, int v_real, int vocab_start) override {
    cpu::crossentropy_partials(partials, logits, maxes, targets, N, Vl, v_real, vocab_start);
  }
  void crossentropy_finish(float* losses, float* logits, const float* maxes, const float* partials,
                           const int32_t* targets, int N, int Vl, int v_real, int vocab_start, float dloss,
                           bool write_grad) override {
    cpu::crossentropy_finish(losses, logits, maxes, partials, targets, N, Vl, v_real, vocab_start, dloss, write_grad);
  }
  void adamw_update(float* param, const float* grad, float* m, float* v, size_t n, float lr, float beta1,
                    float beta2, float eps, float weight_decay, int64_t t) override {
    cpu::adamw_update(param, grad, m, v, n, lr, beta1, beta2, eps, weight_decay, t);
  }
  double sum_squares(const float* x, size_t n) override { return cpu::sum_squares(x, n); }
  double sum(const float* x, size_t n) override { return cpu::sum(x, n); }
  void scale(float* x, size_t n, float s) override {
#pragma omp parallel for simd schedule(static)
    for (size_t i = 0; i < n; ++i) x[i] *= s;
  }

 private:
  double peak_ = 0;
};

}  // namespace

double measure_sgemm_flops(int n, int reps) {
  cpu::RowMat<float> a = cpu::RowMat<float>::Random(n, n), b = cpu::RowMat<float>::Random(n, n), c(n, n);
  c.noalias() = a * b;  // warm-up: thread pool, page faults
  double best = 1e30;   // the best run: the rate the machine can sustain, not its noise
  for (int r = 0; r < reps; ++r) {
    auto t0 = std::chrono::steady_clock::now();
    c.noalias() = a * b;
    best = std::min(best, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  return 2.0 * n * double(n) * n / best;
}

std::unique_ptr<Backend> make_cpu_backend() { return std::make_unique<CpuBackend>(); }

}  // namespace loom
