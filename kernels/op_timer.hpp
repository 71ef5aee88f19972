#pragma once
// Wraps any Backend and accumulates wall time per op (synchronising the backend around each
// op, so it perturbs GPU timing and is for profiling only). `loom bench ops` and
// LOOM_PROFILE_OPS=1 print its table.
#include <chrono>
#include <map>
#include <memory>
#include <string>

#include "kernels/backend.hpp"

namespace loom {

class OpTimer final : public Backend {
 public:
  explicit OpTimer(std::unique_ptr<Backend> inner) : in_(std::move(inner)) {}
  // Table of op name, calls, total ms, share of the timed total; sorted by time.
  std::string report() const;
  void reset() { stats_.clear(); }

  std::string name() const override { return in_->name(); }
  double peak_flops() override { return in_->peak_flops(); }
  float* alloc(size_t n) override { return in_->alloc(n); }
  int32_t* alloc_i32(size_t n) override { return in_->alloc_i32(n); }
  void release(void* p) override { in_->release(p); }
  void upload(float* d, const float* s, size_t n) override { in_->upload(d, s, n); }
  void upload_i32(int32_t* d, const int32_t* s, size_t n) override { in_->upload_i32(d, s, n); }
  void download(float* d, const float* s, size_t n) override { in_->download(d, s, n); }
  void synchronize() override { in_->synchronize(); }
  void zero(float* p, size_t n) override { time("zero", [&] { in_->zero(p, n); }); }
  void encoder_forward(float* o, const int32_t* t, const float* e, const float* p, int B, int T, int C, int vs,
                       int vr) override {
    time("encoder_forward", [&] { in_->encoder_forward(o, t, e, p, B, T, C, vs, vr); });
  }
  void encoder_backward(float* de, float* dp, const float* d, const int32_t* t, int B, int T, int C, int vs,
                        int vr) override {
    time("encoder_backward", [&] { in_->encoder_backward(de, dp, d, t, B, T, C, vs, vr); });
  }
  void layernorm_forward(float* o, float* m, float* r, const float* i, const float* w, const float* b, int N,
                         int C) override {
    time("layernorm_forward", [&] { in_->layernorm_forward(o, m, r, i, w, b, N, C); });
  }
  void layernorm_backward(float* di, float* dw, float* db, const float* d, const float* i, const float* w,
                          const float* m, const float* r, int N, int C) override {
    time("layernorm_backward", [&] { in_->layernorm_backward(di, dw, db, d, i, w, m, r, N, C); });
  }
  void matmul_forward(float* o, const float* i, const float* w, const float* b, int N, int C, int OC) override {
    time("matmul_forward", [&] { in_->matmul_forward(o, i, w, b, N, C, OC); });
  }
  void matmul_backward(float* di, float* dw, float* db, const float* d, const float* i, const float* w, int N, int C,
                       int OC) override {
    time("matmul_backward", [&] { in_->matmul_backward(di, dw, db, d, i, w, N, C, OC); });
  }
  size_t attention_saved_floats(int B, int T, int NH) const override {
    return in_->attention_saved_floats(B, T, NH);
  }
  void attention_forward(float* o, float* s, const float* q, int B, int T, int C, int NH) override {
    time("attention_forward", [&] { in_->attention_forward(o, s, q, B, T, C, NH); });
  }
  void attention_backward(float* dq, const float* d, const float* q, const float* o, const float* s, int B, int T,
                          int C, int NH) override {
    time("attention_backward", [&] { in_->attention_backward(dq, d, q, o, s, B, T, C, NH); });
  }
  void gelu_forward(float* o, const float* i, size_t n) override {
    time("gelu_forward", [&] { in_->gelu_forward(o, i, n); });
  }
  void gelu_backward(float* di, const float* i, const float* d, size_t n) override {
    time("gelu_backward", [&] { in_->gelu_backward(di, i, d, n); });
  }
  void residual_forward(float* o, const float* a, const float* b, size_t n) override {
    time("residual_forward", [&] { in_->residual_forward(o, a, b, n); });
  }
  void softmax_crossentropy(float* l, float* lg, const int32_t* t, int N, int V, int Vp, float dl, bool g) override {
    time("softmax_crossentropy", [&] { in_->softmax_crossentropy(l, lg, t, N, V, Vp, dl, g); });
  }
  void crossentropy_max(float* m, const float* l, int N, int Vl, int vr) override {
    time("crossentropy_max", [&] { in_->crossentropy_max(m, l, N, Vl, vr); });
  }
  void crossentropy_partials(float* p, const float* l, const float* m, const int32_t* t, int N, int Vl, int vr,
                             int vs) override {
    time("crossentropy_partials", [&] { in_->crossentropy_partials(p, l, m, t, N, Vl, vr, vs); });
  }
  void crossentropy_finish(float* lo, float* l, const float* m, const float* p, const int32_t* t, int N, int Vl,
                           int vr, int vs, float dl, bool g) override {
    time("crossentropy_finish", [&] { in_->crossentropy_finish(lo, l, m, p, t, N, Vl, vr, vs, dl, g); });
  }
  void adamw_update(float* p, const float* g, float* m, float* v, size_t n, float lr, float b1, float b2, float eps,
                    float wd, int64_t t) override {
    time("adamw_update", [&] { in_->adamw_update(p, g, m, v, n, lr, b1, b2, eps, wd, t); });
  }
  double sum_squares(const float* x, size_t n) override {
    double r = 0;
    time("sum_squares", [&] { r = in_->sum_squares(x, n); });
    return r;
  }
  double sum(const float* x, size_t n) override {
    double r = 0;
    time("sum", [&] { r = in_->sum(x, n); });
    return r;
  }
  void scale(float* x, size_t n, float s) override { time("scale", [&] { in_->scale(x, n, s); }); }

 private:
  struct Stat {
    long calls = 0;
    double seconds = 0;
  };
  template <typename F>
  void time(const char* op, F&& f) {
    in_->synchronize();
    auto t0 = std::chrono::steady_clock::now();
    f();
    in_->synchronize();
    Stat& s = stats_[op];
    s.calls++;
    s.seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  }
  std::unique_ptr<Backend> in_;
  std::map<std::string, Stat> stats_;
};

}  // namespace loom
