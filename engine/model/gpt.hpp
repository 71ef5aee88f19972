#pragma once
// GPT-2-style decoder written once against the Backend interface: token + position embedding,
// L pre-LayerNorm blocks (causal self-attention, GELU MLP), final LayerNorm, LM head tied to the
// token embedding, fused softmax cross-entropy. Buffers are allocated once for a fixed micro
// batch B; shapes are noted on every buffer (N = B*T).
//
// With tensor parallelism (Megatron-LM): the QKV and MLP-fc projections are column-parallel
// (heads and hidden units split over the tp group), the attention and MLP output projections
// row-parallel, so each block does one all-reduce after each row-parallel projection forward
// (g) and one on the input gradient of each column-parallel projection backward (f): two
// forward, two backward. The embedding and the LM head are vocab-parallel; the cross-entropy
// reduces only per-token scalars, never the logits. Shapes below marked /tp are per rank.
#include <cstdint>
#include <functional>
#include <vector>

#include "engine/model/gpt_shape.hpp"
#include "engine/model/param_table.hpp"
#include "kernels/backend.hpp"
#include "parallel/communicator.hpp"

namespace loom {

// This rank's place in its tensor-parallel group. `comm` (the tp group) is only used when
// size > 1. The model sees just the Communicator interface: no MPI, no NCCL.
struct TensorParallel {
  int rank = 0, size = 1;
  parallel::Communicator* comm = nullptr;
};

class Gpt {
 public:
  Gpt(Backend& backend, const GptShape& shape, int micro_batch, TensorParallel tp = {});
  ~Gpt();
  Gpt(const Gpt&) = delete;
  Gpt& operator=(const Gpt&) = delete;

  const GptShape& shape() const { return shape_; }
  const TensorParallel& tp() const { return tp_; }
  const ParamTable& table() const { return table_; }
  int micro_batch() const { return B_; }
  size_t num_params() const { return table_.total(); }
  float* params() { return params_; }  // flat, backend memory
  float* grads() { return grads_; }    // flat, same offsets as params

  // Sets the parameters from a host buffer of num_params() floats.
  void set_params(const float* host);
  void get_params(float* host) const;
  void get_grads(float* host) const;
  void zero_grads();

  // Forward pass on host tokens/targets (B,T). Returns the mean loss over the B*T positions.
  // With dloss != 0 the logits buffer is turned into dlogits = dloss * d(sum of losses)/dlogits,
  // ready for backward(); use dloss = 1/(B*T*micro_steps) for a mean over the global batch.
  double forward(const int32_t* tokens, const int32_t* targets, float dloss);
  // Accumulates parameter gradients into grads(). Requires the previous forward with dloss != 0.
  // If a hook is set, backward calls it with an offset each time every gradient at or after that
  // offset of the flat buffer is final (after the head, after each block, after the embedding),
  // which is what bucketed data-parallel reduction needs to overlap with backward.
  void backward();
  void set_grad_ready_hook(std::function<void(size_t)> hook) { grad_ready_ = std::move(hook); }
  // The offsets backward reports to the hook, in the order it reports them.
  std::vector<size_t> grad_ready_points() const;
  // This rank's logits (B,T,Vp/tp) of the last forward with dloss == 0, downloaded to host.
  std::vector<float> logits() const;

  // Host bytes of activation memory held for one micro-batch.
  size_t activation_bytes() const { return act_floats_ * sizeof(float); }

 private:
  float* p(const std::string& name) { return params_ + table_.find(name).offset; }
  float* g(const std::string& name) { return grads_ + table_.find(name).offset; }
  struct LayerParams;
  LayerParams layer(float* base, int l);

  void tp_all_reduce(float* buf, size_t n, parallel::ReduceOp op = parallel::ReduceOp::Sum);

  Backend& be_;
  GptShape shape_;
  TensorParallel tp_;
  int Ct_, NHt_, Vt_, vocab_start_, v_real_;  // per-rank widths: C/tp, NH/tp, Vp/tp; vocab slice
  ParamTable table_;
  int B_;
  float* params_ = nullptr;
  float* grads_ = nullptr;
  int32_t* tokens_ = nullptr;   // (B,T)
  int32_t* targets_ = nullptr;  // (B,T)

  // Activations saved for backward. Per layer l (each N*C unless noted):
  struct LayerActs {
    float *ln1, *ln1_mean, *ln1_rstd;  // ln1 (N,C); stats (N)
    float *qkv;                        // (N,3C/tp): this rank's heads' q | k | v
    float *atty, *att;                 // atty (N,C/tp); att: attention_saved_floats
    float *res2;                       // x + attn(ln1(x))
    float *ln2, *ln2_mean, *ln2_rstd;
    float *fch, *fch_gelu;             // (N,4C/tp) each
    float *res3;                       // block output = next block's input
  };
  std::vector<LayerActs> acts_;
  float *encoded_ = nullptr;                                      // (N,C)
  float *lnf_ = nullptr, *lnf_mean_ = nullptr, *lnf_rstd_ = nullptr;  // (N,C), (N), (N)
  float *logits_ = nullptr;                                       // (N,Vp/tp); dlogits after forward(dloss != 0)
  float *losses_ = nullptr;                                       // (N)
  float *ce_max_ = nullptr, *ce_partials_ = nullptr;              // (N), (2N): vocab-parallel CE
  float *proj_scratch_ = nullptr;                                 // (N,C): attn/mlp projection outputs
  // Gradient scratch for backward.
  float *dresidual_ = nullptr, *dln_ = nullptr;                     // (N,C)
  float *datty_ = nullptr;                                          // (N,C/tp)
  float *dqkv_ = nullptr;                                           // (N,3C/tp)
  float *dfch_ = nullptr;                                           // (N,4C/tp)
  std::vector<float*> owned_;
  size_t act_floats_ = 0;
  bool have_grad_logits_ = false;
  std::function<void(size_t)> grad_ready_;
  float* alloc(size_t n, bool activation = true);
};

}  // namespace loom
