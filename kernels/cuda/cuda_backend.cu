#include "kernels/cuda/cuda_backend.hpp"

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <numeric>
#include <vector>

#include "kernels/cuda/cuda_check.cuh"
#include "kernels/cuda/ops.cuh"

namespace loom {
namespace {

class CudaBackend final : public Backend {
 public:
  explicit CudaBackend(int device) : device_(device) {
    LOOM_CUDA_CHECK(cudaSetDevice(device));
    LOOM_CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
    LOOM_CUDA_CHECK(cublasLtCreate(&lt_));
    cudaDeviceProp prop{};
    LOOM_CUDA_CHECK(cudaGetDeviceProperties(&prop, device));
    sms_ = prop.multiProcessorCount;
    // FP32 lanes per SM: 64 on sm_70 and sm_80 (V100, A100), 128 on sm_86 and later (H100).
    fp32_lanes_ = (prop.major < 8 || (prop.major == 8 && prop.minor == 0)) ? 64 : 128;
    // Scratch for cuBLASLt (32 MiB, what Hopper kernels like) and the ops' partial sums; grown
    // on demand by workspace().
    grow_workspace(size_t(32) << 20);
  }
  ~CudaBackend() override {
    cudaStreamSynchronize(stream_);
    if (ws_.ptr) cudaFree(ws_.ptr);
    for (void* p : buckets_) cudaFree(p);
    cublasLtDestroy(lt_);
    cudaStreamDestroy(stream_);
  }

  std::string name() const override { return "cuda"; }
  double peak_flops() override {
    // fp32 (no tensor cores) dense peak: SMs x FP32 lanes x 2 FLOP (FMA) x clock. The MFU
    // denominator for this fp32 backend; bf16 tensor-core peaks come with the bf16 path.
    int clock_khz = 0;
    cudaDeviceGetAttribute(&clock_khz, cudaDevAttrClockRate, device_);
    return double(sms_) * fp32_lanes_ * 2.0 * clock_khz * 1e3;
  }

  float* alloc(size_t n) override { return static_cast<float*>(alloc_bytes(n * sizeof(float))); }
  int32_t* alloc_i32(size_t n) override { return static_cast<int32_t*>(alloc_bytes(n * sizeof(int32_t))); }
  void release(void* p) override {
    if (p) cudaFree(p);
  }
  void upload(float* dst, const float* src, size_t n) override { copy(dst, src, n * sizeof(float), cudaMemcpyHostToDevice); }
  void upload_i32(int32_t* dst, const int32_t* src, size_t n) override {
    copy(dst, src, n * sizeof(int32_t), cudaMemcpyHostToDevice);
  }
  void download(float* dst, const float* src, size_t n) override { copy(dst, src, n * sizeof(float), cudaMemcpyDeviceToHost); }
  void zero(float* p, size_t n) override { LOOM_CUDA_CHECK(cudaMemsetAsync(p, 0, n * sizeof(float), stream_)); }
  void synchronize() override { LOOM_CUDA_CHECK(cudaStreamSynchronize(stream_)); }
  void* stream() override { return stream_; }

  void encoder_forward(float* out, const int32_t* tokens, const float* wte, const float* wpe, int B, int T, int C,
                       int vocab_start, int vocab_rows) override {
    cuda::encoder_forward(out, tokens, wte, wpe, B, T, C, vocab_start, vocab_rows, stream_);
  }
  void encoder_backward(float* dwte, float* dwpe, const float* dout, const int32_t* tokens, int B, int T, int C,
                        int vocab_start, int vocab_rows) override {
    if (dwpe) cuda::encoder_backward_wpe(dwpe, dout, B, T, C, stream_);
    // Buckets of positions per in-range token, on the host (N ints), positions ascending within
    // a bucket: the device sums each bucket in that order.
    const int N = B * T;
    std::vector<int32_t> tok(static_cast<size_t>(N));
    LOOM_CUDA_CHECK(cudaMemcpyAsync(tok.data(), tokens, size_t(N) * sizeof(int32_t), cudaMemcpyDeviceToHost, stream_));
    LOOM_CUDA_CHECK(cudaStreamSynchronize(stream_));
    std::vector<int32_t> order(static_cast<size_t>(N));
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(), [&](int32_t a, int32_t b) { return tok[size_t(a)] < tok[size_t(b)]; });
    std::vector<int32_t> rows, begins, positions;
    for (int32_t p : order) {
      const int32_t r = tok[size_t(p)] - vocab_start;
      if (r < 0 || r >= vocab_rows) continue;
      if (rows.empty() || rows.back() != r) {
        rows.push_back(r);
        begins.push_back(int32_t(positions.size()));
      }
      positions.push_back(p);
    }
    begins.push_back(int32_t(positions.size()));
    if (rows.empty()) return;
    int32_t* d_rows = bucket_buffer(0, rows.size());
    int32_t* d_begins = bucket_buffer(1, begins.size());
    int32_t* d_pos = bucket_buffer(2, positions.size());
    copy(d_rows, rows.data(), rows.size() * 4, cudaMemcpyHostToDevice);
    copy(d_begins, begins.data(), begins.size() * 4, cudaMemcpyHostToDevice);
    copy(d_pos, positions.data(), positions.size() * 4, cudaMemcpyHostToDevice);
    cuda::encoder_backward_wte(dwte, dout, d_rows, d_begins, d_pos, int(rows.size()), C, stream_);
    LOOM_CUDA_CHECK(cudaStreamSynchronize(stream_));  // the host vectors die here
  }

  void layernorm_forward(float* out, float* mean, float* rstd, const float* inp, const float* w, const float* b, int N,
                         int C) override {
    cuda::layernorm_forward(out, mean, rstd, inp, w, b, N, C, stream_);
  }
  void layernorm_backward(float* dinp, float* dw, float* db, const float* dout, const float* inp, const float* w,
                          const float* mean, const float* rstd, int N, int C) override {
    cuda::layernorm_backward(dinp, dw, db, dout, inp, w, mean, rstd, N, C, workspace(size_t(2) * 64 * C * 4), stream_);
  }

  void matmul_forward(float* out, const float* inp, const float* w, const float* bias, int N, int C, int OC) override {
    cuda::matmul_forward(lt_, workspace(0), out, inp, w, bias, N, C, OC, stream_);
  }
  void matmul_backward(float* dinp, float* dw, float* dbias, const float* dout, const float* inp, const float* w,
                       int N, int C, int OC) override {
    cuda::matmul_backward(lt_, workspace(size_t(64) * OC * 4), dinp, dw, dbias, dout, inp, w, N, C, OC, stream_);
  }

  size_t attention_saved_floats(int B, int T, int NH) const override { return size_t(B) * NH * T; }
  void attention_forward(float* out, float* saved, const float* qkv, int B, int T, int C, int NH) override {
    cuda::attention_forward(out, saved, qkv, B, T, C, NH, stream_);
  }
  void attention_backward(float* dqkv, const float* dout, const float* qkv, const float* out, const float* saved, int B,
                          int T, int C, int NH) override {
    cuda::attention_backward(dqkv, dout, qkv, out, saved, B, T, C, NH, workspace(size_t(B) * NH * T * 4), stream_);
  }

  void gelu_forward(float* out, const float* inp, size_t n) override { cuda::gelu_forward(out, inp, n, stream_); }
  void gelu_backward(float* dinp, const float* inp, const float* dout, size_t n) override {
    cuda::gelu_backward(dinp, inp, dout, n, stream_);
  }
  void residual_forward(float* out, const float* a, const float* b, size_t n) override {
    cuda::residual_forward(out, a, b, n, stream_);
  }

  void softmax_crossentropy(float* losses, float* logits, const int32_t* targets, int N, int V, int Vp, float dloss,
                            bool write_grad) override {
    cuda::softmax_crossentropy(losses, logits, targets, N, V, Vp, dloss, write_grad, stream_);
  }
  void crossentropy_max(float* maxes, const float* logits, int N, int Vl, int v_real) override {
    cuda::crossentropy_max(maxes, logits, N, Vl, v_real, stream_);
  }
  void crossentropy_partials(float* partials, const float* logits, const float* maxes, const int32_t* targets, int N,
                             int Vl, int v_real, int vocab_start) override {
    cuda::crossentropy_partials(partials, logits, maxes, targets, N, Vl, v_real, vocab_start, stream_);
  }
  void crossentropy_finish(float* losses, float* logits, const float* maxes, const float* partials,
                           const int32_t* targets, int N, int Vl, int v_real, int vocab_start, float dloss,
                           bool write_grad) override {
    cuda::crossentropy_finish(losses, logits, maxes, partials, targets, N, Vl, v_real, vocab_start, dloss, write_grad,
                              stream_);
  }

  void adamw_update(float* param, const float* grad, float* m, float* v, size_t n, float lr, float beta1, float beta2,
                    float eps, float weight_decay, int64_t t) override {
    cuda::adamw_update(param, grad, m, v, n, lr, beta1, beta2, eps, weight_decay, t, stream_);
  }
  double sum_squares(const float* x, size_t n) override {
    return cuda::sum(x, n, true, workspace((cuda::kReduceBlocks + 1) * sizeof(double)), stream_);
  }
  double sum(const float* x, size_t n) override {
    return cuda::sum(x, n, false, workspace((cuda::kReduceBlocks + 1) * sizeof(double)), stream_);
  }
  void scale(float* x, size_t n, float s) override { cuda::scale(x, n, s, stream_); }

 private:
  void* alloc_bytes(size_t bytes) {
    void* p = nullptr;
    LOOM_CUDA_CHECK(cudaMalloc(&p, std::max<size_t>(bytes, 4)));
    LOOM_CUDA_CHECK(cudaMemsetAsync(p, 0, std::max<size_t>(bytes, 4), stream_));
    return p;
  }
  void copy(void* dst, const void* src, size_t bytes, cudaMemcpyKind kind) {
    if (!bytes) return;
    LOOM_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, kind, stream_));
    LOOM_CUDA_CHECK(cudaStreamSynchronize(stream_));  // host buffers may be reused on return
  }
  // At least `bytes` of scratch (and at least the cuBLASLt size). Growing waits for the stream:
  // work in flight may still use the old buffer.
  cuda::Workspace workspace(size_t bytes) {
    if (bytes > ws_.bytes) grow_workspace(bytes);
    return ws_;
  }
  void grow_workspace(size_t bytes) {
    if (ws_.ptr) {
      LOOM_CUDA_CHECK(cudaStreamSynchronize(stream_));
      cudaFree(ws_.ptr);
      ws_ = {};  // not left pointing at freed memory if the allocation below fails
    }
    void* p = nullptr;
    LOOM_CUDA_CHECK(cudaMalloc(&p, bytes));
    ws_ = {p, bytes};
  }
  int32_t* bucket_buffer(int which, size_t n) {
    if (n > bucket_cap_[which]) {
      LOOM_CUDA_CHECK(cudaStreamSynchronize(stream_));
      if (buckets_[which]) cudaFree(buckets_[which]);
      LOOM_CUDA_CHECK(cudaMalloc(&buckets_[which], n * 4));
      bucket_cap_[which] = n;
    }
    return static_cast<int32_t*>(buckets_[which]);
  }

  int device_ = 0, sms_ = 0, fp32_lanes_ = 128;
  cudaStream_t stream_ = nullptr;
  cublasLtHandle_t lt_ = nullptr;
  cuda::Workspace ws_;
  void* buckets_[3] = {nullptr, nullptr, nullptr};
  size_t bucket_cap_[3] = {0, 0, 0};
};

}  // namespace

std::unique_ptr<Backend> make_cuda_backend(int device) { return std::make_unique<CudaBackend>(device); }

}  // namespace loom

extern "C" loom::Backend* loom_cuda_create_backend(int device, char* error, int error_size) {
  try {
    return new loom::CudaBackend(device);
  } catch (const std::exception& e) {
    std::snprintf(error, size_t(error_size), "%s", e.what());
    return nullptr;
  }
}
