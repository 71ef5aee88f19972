#pragma once
// The training recipe: one struct per YAML section, mapped one-to-one onto the keys documented
// in docs/recipes.md. Defaults live here, in the member initialisers, and nowhere else.
#include <algorithm>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace loom {

struct ModelConfig {
  int n_layer = 12;
  int n_head = 12;
  int d_model = 768;
  int vocab_size = 50257;
  int seq_len = 1024;
  // Start from these weights instead of random ones (a Hugging Face GPT-2 directory, an llm.c
  // .bin or a Loom checkpoint; engine/pretrained/). A resume from checkpoint.dir comes first.
  std::string init_from;
};

struct ParallelConfig {
  int tp = 1;
  int pp = 1;
  int dp = 0;  // 0 means "auto": world / (tp * pp), resolved by resolve_world()
  std::string pp_layers = "auto";   // blocks per pipeline stage: "auto" (n_layer / pp each) or "3,5"
  double bucket_mb = 25.0;          // gradient all-reduce bucket size (MiB of fp32 gradients); 0 means "auto"
  int zero = 0;                     // ZeRO stage: 1 optimizer state, 2 + gradients, 3 + parameters sharded over dp
  bool prefetch = true;             // zero 3: gather the next unit during the current one
  std::string grad_reduce_dtype = "fp32";  // fp32 | bf16: the dtype gradients cross the dp group in
  bool overlap_grad_reduce = true;  // launch each bucket as soon as backward completes it
  std::string allreduce = "auto";   // auto | mpi | ring | hierarchical: host all-reduce algorithm
  double timeout_s = 600;           // a communication call open longer aborts the job; 0: never
};

struct TrainConfig {
  int micro_batch = 4;
  int global_batch = 0;  // 0 means "auto": micro_batch * dp (no gradient accumulation)
  int64_t steps = 1000;
  int64_t stop_at_step = 0;  // > 0: end this run (with a checkpoint) once this step is done
  int max_nonfinite_steps = 3;
  double max_minutes = 0;  // > 0: save and stop (exit 75) before this wall-clock budget runs out  // non-finite loss/grad norm: step skipped; this many in a row stop the run
  uint64_t seed = 1337;
  std::string backend = "cpu";     // cpu | cuda
  std::string precision = "fp32";  // fp32 | bf16 | fp16 (compute dtype; master weights stay fp32)
  double loss_scale_init = 65536;          // fp16: initial dynamic loss scale
  int64_t loss_scale_growth_interval = 2000;  // fp16: good steps before the scale doubles
  double loss_scale_backoff = 0.5;         // fp16: factor on the scale after an overflow
  std::string recompute = "none";  // none | selective | full: activations recomputed in backward
  // The global batch as training goes on (docs/batch_size.md): fixed at global_batch, or chosen
  // by goodput between batch_min and batch_max (0: auto) every batch_every steps.
  std::string batch_policy = "fixed";  // fixed | goodput
  int batch_min = 0;                   // 0 means "auto": global_batch
  int batch_max = 0;                   // 0 means "auto": 8 x global_batch
  int64_t batch_every = 50;
  std::string batch_lr_rule = "sqrt";  // linear | sqrt | adascale
};

struct OptimConfig {
  double lr = 6e-4;
  double min_lr = 6e-5;
  int64_t warmup_steps = 0;
  // The decay after the warmup (engine/optim/lr_schedule.hpp): its shape, the step where it
  // reaches min_lr, and wsd's cooldown.
  std::string lr_decay = "cosine";   // cosine | linear | wsd | inverse_sqrt | constant
  int decay_steps = 0;               // 0 means "auto": train.steps
  int wsd_decay_steps = 0;           // 0 means "auto": a fifth of the steps from warmup to decay_steps
  std::string wsd_shape = "linear";  // linear | cosine | sqrt (1 - sqrt) | exponential
  double weight_decay = 0.1;
  double beta1 = 0.9;
  double beta2 = 0.95;
  double eps = 1e-8;
  double grad_clip = 1.0;  // 0 disables clipping
  std::string offload = "none";  // none | cpu: master weights, moments and update in host memory
};

struct DataConfig {
  std::string train;
  std::string val;
  double val_fraction = 0;      // > 0: validation is the last fraction of data.train (Megatron's --split)
  std::string format = "auto";  // auto | text | loom | llmc | megatron
};

struct CheckpointConfig {
  std::string dir;               // empty: no checkpoints
  int64_t every = 0;             // 0: only at the end of training
  int keep_last = 3;
  std::string resume = "auto";   // auto | never | PATH
  bool async = false;            // write in a background thread while training goes on
  bool allow_changes = false;    // resume even though train.seed or the dataset changed
};

// LoRA fine-tuning (docs/pretrained.md): low-rank adapters on the chosen linear layers, the base
// frozen. rank 0: off.
struct LoraConfig {
  int rank = 0;
  double alpha = 16;                              // the branch is scaled by alpha / rank
  double dropout = 0;                             // on the adapters' input, while training
  std::string targets = "qkv,attn_proj,fc,mlp_proj";
  bool train_embeddings = false;
  bool train_layernorm = false;
  std::string quantize = "none";                  // none | int8 | nf4: the frozen base's storage (QLoRA)
  int quant_block = 64;                           // elements per quantization scale
};

struct LogConfig {
  std::string dir = "runs/default";
  int64_t every = 10;
  int64_t eval_every = 0;  // 0: no validation loss
  int eval_batches = 4;
  std::string choices;       // multiple-choice items scored at every evaluation ("": none)
  int64_t choices_limit = 0; // the first N of them (0: all)
  bool tensorboard = true;   // TensorBoard event files in log.dir
  bool trace = false;        // Chrome trace per rank of log.trace_steps steps
  int64_t trace_steps = 3;   // traced steps, from the second step of the session
  bool noise_scale = true;   // measure and log the gradient noise scale (B_simple)
  double noise_ema = 0.95;   // its moving averages' decay per step
};

struct Recipe {
  ModelConfig model;
  ParallelConfig parallel;
  TrainConfig train;
  OptimConfig optim;
  DataConfig data;
  CheckpointConfig checkpoint;
  LogConfig log;
  LoraConfig lora;

  // Where each key came from ("configs/tiny.yaml:4", "--set train.steps=5" or "default"),
  // so that cross-field errors can point at the lines involved.
  std::map<std::string, std::string> origin;
  std::string source;  // the recipe file's path

  // Values derived from the keys and the world size by resolve_world().
  int world = 1;
  // Blocks of each pipeline stage (pp entries summing to n_layer), from parallel.pp_layers.
  std::vector<int> stage_layers() const;
  int grad_accum() const { return global_batch_resolved() / (train.micro_batch * parallel.dp); }
  int global_batch_resolved() const {
    return train.global_batch > 0 ? train.global_batch : train.micro_batch * parallel.dp;
  }
  bool goodput() const { return train.batch_policy == "goodput"; }
  // The global batch's bounds: [global batch, global batch] under the fixed policy.
  int batch_min_resolved() const {
    return !goodput() ? global_batch_resolved() : train.batch_min > 0 ? train.batch_min : global_batch_resolved();
  }
  int batch_max_resolved() const {
    if (!goodput()) return global_batch_resolved();
    if (train.batch_max > 0) return train.batch_max;
    return int(std::min<int64_t>(8 * int64_t(global_batch_resolved()), INT32_MAX));  // checked: check_goodput
  }
  // The step at which the learning rate's decay reaches optim.min_lr, and wsd's cooldown.
  int64_t decay_steps_resolved() const { return optim.decay_steps > 0 ? optim.decay_steps : train.steps; }
  int64_t wsd_decay_steps_resolved() const {
    if (optim.wsd_decay_steps > 0) return optim.wsd_decay_steps;
    return std::max<int64_t>(1, (decay_steps_resolved() - optim.warmup_steps) / 5);
  }
  // Gradient accumulation at the largest batch (the pipeline's in-flight activations follow it).
  int grad_accum_max() const { return batch_max_resolved() / (train.micro_batch * parallel.dp); }
};

}  // namespace loom
