#pragma once
// The compute backend interface. The model in engine/ is written once against these ops; the
// CPU reference (kernels/cpu) and the CUDA backend (kernels/cuda) implement them. Nothing here
// knows about MPI or about the model's structure: ops see pointers and sizes.
//
// Conventions (shared by every backend):
//   - All pointers come from this backend's alloc()/alloc_i32() (device memory on CUDA).
//   - Row-major. Linear weights are [OC, C] as in torch.nn.Linear: out = inp @ W^T + bias.
//   - Parameter gradients (dweight, dbias, dwte, ...) are ACCUMULATED (+=), so that micro-step
//     gradient accumulation needs no extra pass. Activation gradients are OVERWRITTEN unless the
//     op says otherwise (layernorm_backward accumulates into dinp: it feeds a residual stream).
//   - Dimension letters: B batch, T time, C channels, NH heads, V vocab, Vp padded vocab,
//     N = B*T rows, OC output channels.
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

namespace loom {

class Backend {
 public:
  virtual ~Backend() = default;
  virtual std::string name() const = 0;
  // Peak FLOP/s the backend can sustain on dense matmuls: the MFU denominator.
  virtual double peak_flops() = 0;

  // ---- memory ----
  virtual float* alloc(size_t n) = 0;        // n floats, zero-filled
  virtual int32_t* alloc_i32(size_t n) = 0;  // n ints, zero-filled
  virtual void release(void* p) = 0;
  virtual void upload(float* dst, const float* host_src, size_t n) = 0;
  virtual void upload_i32(int32_t* dst, const int32_t* host_src, size_t n) = 0;
  virtual void download(float* host_dst, const float* src, size_t n) = 0;
  virtual void zero(float* p, size_t n) = 0;
  virtual void synchronize() {}
  // The stream the ops run on (a cudaStream_t on CUDA; null on the CPU): device-buffer
  // communicators order their work after it.
  virtual void* stream() { return nullptr; }

  // ---- ops, each with its backward ----
  // out (B,T,C) = wte[tokens - vocab_start] + wpe[t]. wte holds the `vocab_rows` rows
  // [vocab_start, vocab_start + vocab_rows) of the embedding (all of it without tensor
  // parallelism); tokens outside that range contribute zero (vocab-parallel embedding: the
  // partial results are summed over the tp group). wpe may be null: no position term.
  virtual void encoder_forward(float* out, const int32_t* tokens, const float* wte, const float* wpe, int B, int T,
                               int C, int vocab_start, int vocab_rows) = 0;
  // dwte (vocab_rows,C) += scatter of dout by in-range token; dwpe (T,C) += sum over batch (if
  // not null). Deterministic.
  virtual void encoder_backward(float* dwte, float* dwpe, const float* dout, const int32_t* tokens, int B, int T,
                                int C, int vocab_start, int vocab_rows) = 0;

  // out (N,C) = (inp - mean) * rstd * w + b; saves mean (N), rstd (N). eps = 1e-5.
  virtual void layernorm_forward(float* out, float* mean, float* rstd, const float* inp, const float* w,
                                 const float* b, int N, int C) = 0;
  // dinp (N,C) += ..., dw (C) += ..., db (C) += ...
  virtual void layernorm_backward(float* dinp, float* dw, float* db, const float* dout, const float* inp,
                                  const float* w, const float* mean, const float* rstd, int N, int C) = 0;

  // out (N,OC) = inp (N,C) @ w (OC,C)^T + bias (OC) [bias may be null]
  virtual void matmul_forward(float* out, const float* inp, const float* w, const float* bias, int N, int C,
                              int OC) = 0;
  // dinp (N,C) = dout @ w [skipped if null]; dw (OC,C) += dout^T @ inp; dbias (OC) += colsum(dout) [if not null]
  virtual void matmul_backward(float* dinp, float* dw, float* dbias, const float* dout, const float* inp,
                               const float* w, int N, int C, int OC) = 0;

  // Causal multi-head self-attention. qkv (B,T,3C) holds q | k | v; head h is the slice
  // [h*hs, (h+1)*hs) of each, hs = C/NH. out (B,T,C). `saved` holds what backward needs; its
  // size is backend-specific: attention_saved_floats().
  virtual size_t attention_saved_floats(int B, int T, int NH) const = 0;
  virtual void attention_forward(float* out, float* saved, const float* qkv, int B, int T, int C, int NH) = 0;
  // dqkv (B,T,3C) = ... (overwritten)
  virtual void attention_backward(float* dqkv, const float* dout, const float* qkv, const float* out,
                                  const float* saved, int B, int T, int C, int NH) = 0;

  // GELU, tanh approximation. dinp = dout * gelu'(inp) (overwritten; dinp may alias dout).
  virtual void gelu_forward(float* out, const float* inp, size_t n) = 0;
  virtual void gelu_backward(float* dinp, const float* inp, const float* dout, size_t n) = 0;

  // out = a + b
  virtual void residual_forward(float* out, const float* a, const float* b, size_t n) = 0;

  // Fused softmax cross-entropy over logits (N,Vp) of which the first V columns are real.
  // losses (N) = -log softmax(logits[:, :V])[target]. If write_grad, logits are replaced by
  // dlogits = dloss * (softmax - onehot(target)) for the first V columns and 0 for the padding.
  virtual void softmax_crossentropy(float* losses, float* logits, const int32_t* targets, int N, int V, int Vp,
                                    float dloss, bool write_grad) = 0;

  // Vocab-parallel cross-entropy: the logits (N,Vl) of this rank are the columns
  // [vocab_start, vocab_start + Vl) of the padded vocabulary, of which the first `v_real` are
  // real tokens. Three steps with a reduction over the tp group after the first two; the logits
  // are never gathered and backward needs no communication:
  //   1. maxes (N) = row max over the real local columns (-inf if none);        all-reduce max
  //   2. partials (2N) = [sum of exp(logit - max) over real columns | the target's logit if this
  //      rank owns the target, else 0];                                          all-reduce sum
  //   3. losses (N) = log(sumexp) + max - target logit; with write_grad the logits become
  //      dloss * (softmax - onehot) on real columns, 0 on padding.
  virtual void crossentropy_max(float* maxes, const float* logits, int N, int Vl, int v_real) = 0;
  virtual void crossentropy_partials(float* partials, const float* logits, const float* maxes,
                                     const int32_t* targets, int N, int Vl, int v_real, int vocab_start) = 0;
  virtual void crossentropy_finish(float* losses, float* logits, const float* maxes, const float* partials,
                                   const int32_t* targets, int N, int Vl, int v_real, int vocab_start, float dloss,
                                   bool write_grad) = 0;

  // ---- optimizer and reductions over flat buffers ----
  // AdamW with decoupled weight decay (PyTorch's formulation); t is the 1-based step.
  virtual void adamw_update(float* param, const float* grad, float* m, float* v, size_t n, float lr, float beta1,
                            float beta2, float eps, float weight_decay, int64_t t) = 0;
  // Sum of squares in double, deterministic (independent of thread count).
  virtual double sum_squares(const float* x, size_t n) = 0;
  virtual void scale(float* x, size_t n, float s) = 0;
  // Sum of n floats (e.g. the per-token losses), deterministic.
  virtual double sum(const float* x, size_t n) = 0;
};

// The CPU reference backend (Eigen + OpenBLAS + OpenMP). Always available.
std::unique_ptr<Backend> make_cpu_backend();

// Measured single-precision gemm rate of this machine: the best of `reps` n x n x n products, FLOP/s.
double measure_sgemm_flops(int n, int reps);

}  // namespace loom
