#pragma once
// GPT-2-style decoder written once against the Backend interface: token + position embedding,
// L pre-LayerNorm blocks (causal self-attention, GELU MLP), final LayerNorm, LM head tied to the
// token embedding, fused softmax cross-entropy. Buffers are allocated once for a fixed micro
// batch B; shapes are noted on every buffer (N = B*T).
//
// Tensor parallelism (Megatron-LM) lives in the layers the model is built from (tp_layers.hpp):
// each block (gpt_block.hpp) is column-parallel QKV and MLP-fc, row-parallel projections; the
// embedding and the LM head are vocab-parallel, and the cross-entropy reduces only per-token
// scalars, never the logits. Shapes below marked /tp are per rank.
//
// With pipeline parallelism a Gpt is one stage: a contiguous range of blocks, plus the
// embedding on the first stage and ln_f + head + loss on the last (which holds its own copy of
// the tied wte: ParamInfo::tied). A stage keeps activations for `slots` micro-batches at once
// (1F1B keeps at most pp - stage in flight); its input and output cross stages through
// input()/output() and their gradients through output_grad()/input_grad().
//
// Mixed precision (train.precision): the parameters (the master copy the optimizer updates and
// checkpoints hold) and their gradients are fp32; the ops read a copy of the weights in the
// compute dtype (compute_params(), refreshed by sync_compute_weights(); the master itself in
// fp32) and keep activations and activation gradients in it. LayerNorm statistics and losses
// are fp32 (the op list's Fp32 tensors).
#include <cstdint>
#include <functional>
#include <string>
#include <unordered_map>
#include <vector>

#include "engine/model/gpt_block.hpp"
#include "engine/model/gpt_memory.hpp"
#include "engine/model/gpt_shape.hpp"
#include "engine/model/param_table.hpp"
#include "engine/model/tp_layers.hpp"
#include "engine/model/unit_storage.hpp"
#include "kernels/backend.hpp"
#include "parallel/communicator.hpp"

namespace loom {

// Where code outside the model attaches to its passes. Any member may be empty.
struct ModelHooks {
  // Every gradient at or after this flat offset is final (bucketed data-parallel reduction can
  // launch it): called after the head (ln_f's offset), after each block (its first offset) and
  // with 0 at the end, in the order of grad_ready_points(). Only while the model holds its
  // gradients (no UnitStorage for them: ZeRO 0 and 1).
  std::function<void(size_t offset)> grads_ready_from;
};

// What the model allocates of its parameters and gradients; the rest is a UnitStorage's
// (unit_storage.hpp), attached with set_storage() before the first pass.
enum class ModelHolds {
  All,          // flat fp32 master, its compute copy and flat fp32 gradients (ZeRO 0, 1)
  Weights,      // the weights only; gradients unit by unit from the storage (ZeRO-2)
  Nothing,      // neither: weights gathered and gradients reduced unit by unit (ZeRO-3)
};

class Gpt {
 public:
  Gpt(Backend& backend, const GptShape& shape, int micro_batch, TensorParallel tp = {}, StageSpec stage = {},
      int slots = 1, Recompute recompute = Recompute::None, DType compute = DType::f32,
      ModelHolds holds = ModelHolds::All);
  Backend& backend() { return be_; }
  ~Gpt();
  Gpt(const Gpt&) = delete;
  Gpt& operator=(const Gpt&) = delete;

  const GptShape& shape() const { return shape_; }
  const TensorParallel& tp() const { return tp_; }
  const StageSpec& stage() const { return stage_; }
  // The trainable parameters (what the optimizer, the gradient reduction and checkpoints see):
  // every tensor, or with LoRA (GptShape::lora) the adapters and whatever else trains.
  const ParamTable& table() const { return table_; }
  // With LoRA: the frozen base tensors (no gradients, no optimizer state), held in the compute
  // dtype, whole on every data-parallel rank (this rank's tp slices). Empty without LoRA.
  const ParamTable& frozen_table() const { return frozen_table_; }
  // Sets the frozen tensors from host fp32 (frozen_table().total() values, its flat layout).
  // With QLoRA (lora.quantize) the block weights are quantized here on the host, blockwise, and
  // kept as codes and scales.
  void set_frozen(const float* host);
  // The same, a tensor at a time: `fill(p, dst)` writes tensor p's p.numel fp32 values into a
  // host buffer as large as the largest frozen tensor, so the whole base never exists in fp32 on
  // the host (it may be most of a QLoRA run's memory).
  void set_frozen(const std::function<void(const ParamInfo&, float*)>& fill);
  // Backend memory of the frozen base: dense tensors, and quantized codes + scales.
  size_t frozen_bytes() const { return frozen_bytes_; }
  int micro_batch() const { return B_; }
  size_t num_params() const { return table_.total(); }
  DType compute_dtype() const { return compute_; }
  ModelHolds holds() const { return holds_; }
  // The units weights are gathered and gradients reduced by (param_units(table())).
  const std::vector<ParamUnit>& units() const { return units_; }
  float* params() { return params_; }  // flat fp32 master, backend memory (null: ModelHolds::Nothing)
  float* grads() { return grads_; }    // flat fp32, same offsets as params (null unless ModelHolds::All)
  // The weights the ops read: a compute-dtype copy of params() (params() itself in fp32).
  TypedPtr compute_params() { return wparams_; }
  // Refreshes the compute copy from the master (after the optimizer's update); no-op in fp32.
  void sync_compute_weights();
  // Attaches the storage of what the model does not hold (required unless ModelHolds::All). The
  // storage must outlive the model's passes.
  void set_storage(UnitStorage* storage);

  // Sets the parameters from a host buffer of num_params() floats (and their compute copy).
  void set_params(const float* host);
  // Sets elements [offset, offset + n) of the flat parameters (the initial parameters and a
  // checkpoint go in tensor by tensor). ModelHolds::Nothing: the storage keeps what this rank owns.
  void set_params(size_t offset, size_t n, const float* host);
  // The whole flat parameter buffer into host memory. ModelHolds::Nothing: gathered by the
  // storage, collective over its data-parallel group.
  void get_params(float* host) const;
  // The same, a piece at a time in ascending order: `use(begin, n, data)` gets elements
  // [begin, begin + n) in host memory until it returns. For what needs every parameter but not
  // all at once (a checkpoint's snapshot keeps only the slices its rank writes): no more than a
  // piece (16 MB, or a ZeRO-3 bucket) is on the host at a time. Collective as get_params.
  void visit_params(const std::function<void(size_t begin, size_t n, const float* data)>& use) const;
  void get_grads(float* host) const;  // ModelHolds::All only
  void zero_grads();                  // no-op unless ModelHolds::All

  // Forward pass of micro-batch slot `slot` on host tokens/targets (B,T) (tokens are read by the
  // first stage, targets by the last; other stages read input(slot)). Returns the mean loss over
  // the B*T positions on the last stage, 0 elsewhere. With dloss != 0 the last stage turns its
  // logits into dlogits = dloss * d(sum of losses)/dlogits, ready for backward().
  double forward(int slot, const int32_t* tokens, const int32_t* targets, float dloss);
  double forward(const int32_t* tokens, const int32_t* targets, float dloss) {
    return forward(0, tokens, targets, dloss);
  }
  // Accumulates parameter gradients into grads(), for the slot's last forward (with dloss != 0
  // on the last stage; other stages need output_grad() filled first), calling the hooks.
  void backward(int slot);
  void backward() { backward(0); }
  void set_hooks(ModelHooks hooks) { hooks_ = std::move(hooks); }
  // LoRA dropout: the seed of slot `slot`'s next training forward (and its backward); a forward
  // with dloss == 0 (evaluation) never drops. Without lora.dropout it is not used.
  void set_dropout_seed(int slot, uint64_t seed) { slots_.at(size_t(slot)).dropout_seed = seed; }
  // The offsets backward reports to hooks.grads_ready_from, in the order it reports them.
  std::vector<size_t> grad_ready_points() const;

  // Pipeline boundaries, each (B,T,C) in backend memory, in the compute dtype.
  TypedPtr input(int slot);         // a non-first stage's input activation for the slot
  ConstTypedPtr output(int slot);   // a non-last stage's output after forward(slot)
  TypedPtr output_grad();           // a non-last stage receives d(output) here before backward
  ConstTypedPtr input_grad();       // a non-first stage's d(input) after backward

  // This rank's logits (B,T,Vp/tp) of the last forward of slot 0 with dloss == 0 (last stage),
  // widened to fp32.
  std::vector<float> logits() const;
  // The loss at each of the B*T positions of the last forward (last stage): the cross-entropy of
  // its target, in nats (multiple-choice evaluation scores the positions of each ending).
  std::vector<float> position_losses() const;

  // Bytes of activation memory held for all slots.
  size_t activation_bytes() const { return act_bytes_; }
  // Bytes of the parameters (fp32 master and compute copy) and gradients the model holds itself
  // (ModelHolds: what a UnitStorage holds is its own to report).
  size_t param_bytes() const {
    if (!params_) return 0;
    return table_.total() * (sizeof(float) + (compute_ != DType::f32 ? dtype_size(compute_) : 0));
  }
  size_t grad_bytes() const { return grads_ ? table_.total() * sizeof(float) : 0; }

 private:
  // Tensor `name`: a trainable one of unit u, whose weights / gradients were acquired (weights(),
  // grads_of()), or a frozen one (no gradient: null).
  TypedPtr p(int u, const std::string& name) const;
  float* g(int u, const std::string& name) const;
  // Block `layer`'s tensors (unit u's trainable ones from `w` / `dw`, the rest frozen).
  BlockWeights block_weights(int u, TypedPtr w, int layer) const;
  BlockGrads block_grads(int u, float* dw, int layer) const;
  // Unit u's weights for the pass about to use them (`next`: the unit used after it), and back.
  TypedPtr weights(int u, int next);
  void release(int u);
  float* grads_of(int u);
  void grads_done(int u);

  Backend& be_;
  GptShape shape_;
  TensorParallel tp_;
  StageSpec stage_;
  ParamTable table_;
  ParamTable frozen_table_;
  int B_;
  // The layers (views: they hold no memory).
  VocabParallelEmbedding embed_;    // wte slice (Vp/tp,C) + wpe (T,C): first stage
  GptBlock block_;                  // every block has the same shape
  ColumnParallelLinear head_;       // lnf (N,C) -> logits (N,Vp/tp), weight = wte's slice: last stage
  VocabParallelCrossEntropy loss_;  // last stage
  DType compute_;
  ModelHolds holds_;
  float* params_ = nullptr;
  float* grads_ = nullptr;
  TypedPtr wparams_;  // compute copy (== params_ in fp32)
  TypedPtr frozen_;   // the frozen tensors that stay dense, compute dtype (null without any)
  std::unordered_map<std::string, size_t> frozen_dense_;  // name -> element offset into frozen_
  // QLoRA: a quantized frozen tensor, and the dequantized copies of the block in use.
  struct QuantizedTensor {
    uint8_t* codes = nullptr;
    float* scales = nullptr;
    size_t n = 0;
  };
  std::unordered_map<std::string, QuantizedTensor> frozen_quant_;
  TypedPtr dequant_scratch_;                           // one block's quantized weights, dense
  mutable std::unordered_map<std::string, TypedPtr> dequantized_;  // name -> into dequant_scratch_
  int dequantized_layer_ = -1;
  size_t frozen_bytes_ = 0;
  // QLoRA: block `layer`'s quantized weights into dequant_scratch_ (no-op if already there).
  void dequantize_block(int layer);
  void alloc_frozen();  // the frozen base's storage (gpt_frozen.cpp)
  TypedPtr frozen_ptr(const std::string& name) const;  // a frozen tensor's weights (null: not frozen)
  UnitStorage* storage_ = nullptr;
  std::vector<ParamUnit> units_;
  int unit_embed_ = -1, unit_final_ = -1;  // -1: this stage has none
  std::vector<int> unit_of_block_;         // per block of this stage
  std::vector<TypedPtr> wbase_;            // per unit: its weights (flat: into wparams_)
  std::vector<float*> gbase_;              // per unit: its gradients (flat: into grads_)

  // Activations saved for backward, per slot: per block, BlockActs (gpt_block.hpp).
  struct Slot {
    int32_t *tokens = nullptr, *targets = nullptr;  // (B,T)
    TypedPtr input;                                 // (N,C): embedding output, or the previous stage's
    std::vector<BlockActs> layers;                  // this stage's blocks
    TypedPtr lnf;                                   // last stage: (N,C)
    float *lnf_mean = nullptr, *lnf_rstd = nullptr; // last stage: (N), (N)
    TypedPtr logits;                                // last stage: (N,Vp/tp); dlogits after forward(dloss != 0)
    bool grad_logits = false;
    uint64_t dropout_seed = 0;  // set_dropout_seed
    bool dropping = false;      // the slot's last forward applied dropout (a training forward)
  };
  // Block `layer`'s dropout seed for slot s (0: no dropout).
  uint64_t block_dropout_seed(const Slot& s, int layer) const;
  std::vector<Slot> slots_;
  Recompute recompute_ = Recompute::None;
  BlockActs shared_{};  // Selective: att only; Full: every buffer but res3 (gpt_memory.hpp)
  BlockActs acts(const Slot& s, int i) const;
  void alloc_block_buffers(BlockActs& a, bool with_att);
  size_t attention_saved_bytes() const;
  float *losses_ = nullptr;                                       // (N)
  float *ce_max_ = nullptr, *ce_partials_ = nullptr;              // (N), (2N): vocab-parallel CE
  TypedPtr proj_scratch_;                                         // (N,C): attn/mlp projection outputs
  // Gradient scratch for backward.
  TypedPtr dresidual_;              // (N,C): d(residual stream); ends as d(input)
  TypedPtr dout_;                   // (N,C): d(output) from the next stage
  BlockGradScratch dblock_{};       // dln (N,C) (also the head's d(lnf)), datty, dqkv, dfch
  std::vector<void*> owned_;
  size_t act_bytes_ = 0;
  ModelHooks hooks_;
  // Backend memory owned by the model; `activation` memory is counted in act_bytes_.
  void* alloc_bytes(size_t bytes, bool activation);
  TypedPtr alloc_act(size_t n) { return {alloc_bytes(n * dtype_size(compute_), true), compute_}; }
  float* alloc_f32(size_t n, bool activation = true) {
    return static_cast<float*>(alloc_bytes(n * sizeof(float), activation));
  }
};

}  // namespace loom
