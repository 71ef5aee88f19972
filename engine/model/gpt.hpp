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
//
// With pipeline parallelism a Gpt is one stage: a contiguous range of blocks, plus the
// embedding on the first stage and ln_f + head + loss on the last (which holds its own copy of
// the tied wte). A stage keeps activations for `slots` micro-batches at once (1F1B keeps at
// most pp - stage in flight); its input and output cross stages through input()/output() and
// their gradients through output_grad()/input_grad().
#include <cstdint>
#include <functional>
#include <vector>

#include "engine/model/gpt_memory.hpp"
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
  Gpt(Backend& backend, const GptShape& shape, int micro_batch, TensorParallel tp = {}, StageSpec stage = {},
      int slots = 1, Recompute recompute = Recompute::None);
  ~Gpt();
  Gpt(const Gpt&) = delete;
  Gpt& operator=(const Gpt&) = delete;

  const GptShape& shape() const { return shape_; }
  const TensorParallel& tp() const { return tp_; }
  const StageSpec& stage() const { return stage_; }
  const ParamTable& table() const { return table_; }
  int micro_batch() const { return B_; }
  size_t num_params() const { return table_.total(); }
  float* params() { return params_; }  // flat, backend memory
  float* grads() { return grads_; }    // flat, same offsets as params

  // Sets the parameters from a host buffer of num_params() floats.
  void set_params(const float* host);
  // Sets elements [offset, offset + n) of the flat parameters (a checkpoint loads tensor by tensor).
  void set_params(size_t offset, size_t n, const float* host);
  void get_params(float* host) const;
  void get_grads(float* host) const;
  void zero_grads();

  // Forward pass of micro-batch slot `slot` on host tokens/targets (B,T) (tokens are read by the
  // first stage, targets by the last; other stages read input(slot)). Returns the mean loss over
  // the B*T positions on the last stage, 0 elsewhere. With dloss != 0 the last stage turns its
  // logits into dlogits = dloss * d(sum of losses)/dlogits, ready for backward().
  double forward(int slot, const int32_t* tokens, const int32_t* targets, float dloss);
  double forward(const int32_t* tokens, const int32_t* targets, float dloss) {
    return forward(0, tokens, targets, dloss);
  }
  // Accumulates parameter gradients into grads(), for the slot's last forward (with dloss != 0
  // on the last stage; other stages need output_grad() filled first). If a hook is set, backward
  // calls it with an offset each time every gradient at or after that offset of the flat buffer
  // is final, which is what bucketed data-parallel reduction needs to overlap with backward.
  void backward(int slot);
  void backward() { backward(0); }
  void set_grad_ready_hook(std::function<void(size_t)> hook) { grad_ready_ = std::move(hook); }
  // The offsets backward reports to the hook, in the order it reports them.
  std::vector<size_t> grad_ready_points() const;

  // Pipeline boundaries, each (B,T,C) in backend memory.
  float* input(int slot);         // a non-first stage's input activation for the slot
  const float* output(int slot);  // a non-last stage's output after forward(slot)
  float* output_grad();           // a non-last stage receives d(output) here before backward
  const float* input_grad();      // a non-first stage's d(input) after backward

  // This rank's logits (B,T,Vp/tp) of the last forward of slot 0 with dloss == 0 (last stage).
  std::vector<float> logits() const;

  // Bytes of activation memory held for all slots.
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
  StageSpec stage_;
  int Ct_, NHt_, Vt_, vocab_start_, v_real_;  // per-rank widths: C/tp, NH/tp, Vp/tp; vocab slice
  ParamTable table_;
  int B_;
  float* params_ = nullptr;
  float* grads_ = nullptr;

  // Activations saved for backward, per slot. Per layer (each N*C unless noted):
  struct LayerActs {
    float *ln1, *ln1_mean, *ln1_rstd;  // ln1 (N,C); stats (N)
    float *qkv;                        // (N,3C/tp): this rank's heads' q | k | v
    float *atty, *att;                 // atty (N,C/tp); att: attention_saved_floats
    float *res2;                       // x + attn(ln1(x))
    float *ln2, *ln2_mean, *ln2_rstd;
    float *fch, *fch_gelu;             // (N,4C/tp) each
    float *res3;                       // block output = next block's input
  };
  struct Slot {
    int32_t *tokens = nullptr, *targets = nullptr;  // (B,T)
    float* input = nullptr;                         // (N,C): embedding output, or the previous stage's
    std::vector<LayerActs> layers;                  // this stage's blocks
    float *lnf = nullptr, *lnf_mean = nullptr, *lnf_rstd = nullptr;  // last stage: (N,C), (N), (N)
    float* logits = nullptr;                        // last stage: (N,Vp/tp); dlogits after forward(dloss != 0)
    bool grad_logits = false;
  };
  std::vector<Slot> slots_;
  Recompute recompute_ = Recompute::None;
  LayerActs shared_{};  // Selective: att only; Full: every buffer but res3 (gpt_memory.hpp)
  void layer_forward(int l, const float* x, const LayerActs& a);
  LayerActs acts(const Slot& s, int i) const;
  void alloc_block_buffers(LayerActs& a, bool with_att);
  size_t attention_saved_floats() const;
  float *losses_ = nullptr;                                       // (N)
  float *ce_max_ = nullptr, *ce_partials_ = nullptr;              // (N), (2N): vocab-parallel CE
  float *proj_scratch_ = nullptr;                                 // (N,C): attn/mlp projection outputs
  // Gradient scratch for backward.
  float *dresidual_ = nullptr, *dln_ = nullptr;                     // (N,C); dresidual_ ends as d(input)
  float *dout_ = nullptr;                                           // (N,C): d(output) from the next stage
  float *datty_ = nullptr;                                          // (N,C/tp)
  float *dqkv_ = nullptr;                                           // (N,3C/tp)
  float *dfch_ = nullptr;                                           // (N,4C/tp)
  std::vector<float*> owned_;
  std::vector<int32_t*> owned_i32_;
  size_t act_floats_ = 0;
  std::function<void(size_t)> grad_ready_;
  float* alloc(size_t n, bool activation = true);
};

}  // namespace loom
