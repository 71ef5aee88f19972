#include "engine/config/recipe_fields.hpp"

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <limits>

namespace loom {
namespace {

constexpr double kIntMax = 2147483647.0;
constexpr double kHuge = 9.0e18;  // int64 keys: steps and intervals
constexpr double kInf = std::numeric_limits<double>::infinity();

#define LOOM_MEMBER(sec, name) [](Recipe& r) -> void* { return &r.sec.name; }

std::vector<Field> make_fields() {
  using K = FieldKind;
  return {
      {"model", "n_layer", K::Int, 1, 4096, {}, LOOM_MEMBER(model, n_layer), "number of transformer blocks (L)"},
      {"model", "n_head", K::Int, 1, 4096, {}, LOOM_MEMBER(model, n_head), "attention heads per block (NH); must divide d_model"},
      {"model", "d_model", K::Int, 1, 1 << 20, {}, LOOM_MEMBER(model, d_model), "hidden size (C)"},
      {"model", "vocab_size", K::Int, 2, kIntMax, {}, LOOM_MEMBER(model, vocab_size), "token ids are in [0, vocab_size); padded internally to a multiple of 128*tp"},
      {"model", "seq_len", K::Int, 1, 1 << 20, {}, LOOM_MEMBER(model, seq_len), "context length (T), also the size of the position table"},
      {"model", "init_from", K::String, 0, 0, {}, LOOM_MEMBER(model, init_from), "start from pretrained weights instead of random ones: a Hugging Face GPT-2 directory (config.json + model.safetensors), an llm.c checkpoint (.bin) or a Loom checkpoint (or checkpoint.dir: its newest); the model keys must match it (seq_len may be shorter); \"\": random init. A run that resumes from checkpoint.dir loads that instead (docs/pretrained.md)"},

      {"parallel", "tp", K::Int, 1, 4096, {}, LOOM_MEMBER(parallel, tp), "tensor-parallel degree; must divide n_head"},
      {"parallel", "pp", K::Int, 1, 4096, {}, LOOM_MEMBER(parallel, pp), "pipeline-parallel degree; must divide n_layer"},
      {"parallel", "dp", K::IntOrAuto, 1, 1 << 20, {}, LOOM_MEMBER(parallel, dp), "data-parallel degree, or auto = world / (tp*pp)"},
      {"parallel", "pp_layers", K::String, 0, 0, {}, LOOM_MEMBER(parallel, pp_layers), "blocks per pipeline stage: auto (n_layer/pp each) or a list such as \"3,5\" (pp entries summing to n_layer)"},
      {"parallel", "bucket_mb", K::FloatOrAuto, 1e-6, 1e6, {}, LOOM_MEMBER(parallel, bucket_mb), "gradient reduction bucket size in MiB (of fp32 gradients), or auto: chosen after the second step from a timed probe of the dp link and the measured backward time (zero 0 and 1; zero 2 and 3 keep 25; docs/parallelism.md \"Bucket size\")"},
      {"parallel", "zero", K::Int, 0, 3, {}, LOOM_MEMBER(parallel, zero), "ZeRO stage over dp: 0 replicated; 1 optimizer state and update sharded; 2 also gradients (reduce-scattered unit by unit during backward); 3 also parameters (each unit all-gathered just before use and freed after)"},
      {"parallel", "prefetch", K::Bool, 0, 0, {}, LOOM_MEMBER(parallel, prefetch), "zero 3: start gathering the next unit's parameters while the current one computes (false: gather each on demand)"},
      {"parallel", "grad_reduce_dtype", K::String, 0, 0, {"fp32", "bf16"}, LOOM_MEMBER(parallel, grad_reduce_dtype), "dtype the gradients are reduced in over the data-parallel group: fp32 (exact to fp32 rounding) or bf16 (half the bytes on the wire; each bucket rounded to bf16 before the sum and the sum rounded again)"},
      {"parallel", "overlap_grad_reduce", K::Bool, 0, 0, {}, LOOM_MEMBER(parallel, overlap_grad_reduce), "launch each gradient bucket's reduction as soon as backward completes it (false: all after backward)"},
      {"parallel", "allreduce", K::String, 0, 0, {"auto", "mpi", "ring", "hierarchical"}, LOOM_MEMBER(parallel, allreduce), "algorithm of every host-buffer all-reduce and reduce-scatter (MPI communicators): auto (MPI's below 4 MiB, the ring from 4 MiB; by message size and group size only, so one layout sums identically on one host and across nodes), mpi (MPI_Allreduce, MPI_Reduce_scatter), ring (pipelined ring over point-to-point: bandwidth-optimal on TCP), hierarchical (all-reduce: reduce inside each node over shared memory, ring among the nodes' first ranks, broadcast; depends on placement; reduce-scatter: the ring)"},
      {"parallel", "timeout_s", K::Float, 0, 1e7, {}, LOOM_MEMBER(parallel, timeout_s), "a communication call that has not completed after this many seconds aborts the whole job, naming the call, group and step (0: wait forever)"},

      {"train", "micro_batch", K::Int, 1, 1 << 20, {}, LOOM_MEMBER(train, micro_batch), "sequences per rank per forward/backward (B)"},
      {"train", "global_batch", K::IntOrAuto, 1, kIntMax, {}, LOOM_MEMBER(train, global_batch), "sequences per optimizer step over all ranks, or auto = micro_batch*dp; a multiple of micro_batch*dp (the rest is gradient accumulation)"},
      {"train", "steps", K::Int64, 1, kHuge, {}, LOOM_MEMBER(train, steps), "optimizer steps to train"},
      {"train", "stop_at_step", K::Int64, 0, kHuge, {}, LOOM_MEMBER(train, stop_at_step), "end this run after this step (saving a checkpoint), to continue later with checkpoint.resume; without checkpoint.dir nothing is saved and the run exits 4; 0: run to train.steps"},
      {"train", "max_nonfinite_steps", K::Int, 1, kIntMax, {}, LOOM_MEMBER(train, max_nonfinite_steps), "a step whose loss or gradient norm is NaN/inf is skipped (no update); this many in a row stop the run with a checkpoint of the last good state and exit status 1"},
      {"train", "max_minutes", K::Float, 0, 1e7, {}, LOOM_MEMBER(train, max_minutes), "wall-clock budget of this session in minutes: when the next step and a checkpoint save would not fit, save and exit with status 75 (resumable); 0: no limit"},
      {"train", "seed", K::UInt64, 0, 1.8e19, {}, LOOM_MEMBER(train, seed), "seed of the initialisation and of data sampling"},
      {"train", "backend", K::String, 0, 0, {"cpu", "cuda"}, LOOM_MEMBER(train, backend), "compute backend: cpu (Eigen/OpenBLAS reference) or cuda"},
      {"train", "recompute", K::String, 0, 0, {"none", "selective", "full"}, LOOM_MEMBER(train, recompute), "activation recomputation: none; selective (attention's saved state recomputed in backward: on the CPU the B*NH*T*T probabilities); full (only each block's output kept, the block re-run before its backward)"},
      {"train", "precision", K::String, 0, 0, {"fp32", "bf16", "fp16"}, LOOM_MEMBER(train, precision), "compute dtype: weights copy, activations and their gradients; master weights, gradients, optimizer state, LayerNorm statistics and losses stay fp32 (docs/precision.md)"},
      {"train", "loss_scale_init", K::Float, 1, 1e30, {}, LOOM_MEMBER(train, loss_scale_init), "fp16 only: initial dynamic loss scale"},
      {"train", "loss_scale_growth_interval", K::Int64, 1, kHuge, {}, LOOM_MEMBER(train, loss_scale_growth_interval), "fp16 only: steps without overflow after which the loss scale doubles"},
      {"train", "loss_scale_backoff", K::Float, 1e-6, 0.999999, {}, LOOM_MEMBER(train, loss_scale_backoff), "fp16 only: factor on the loss scale after a step whose gradients overflowed (the step is skipped)"},

      {"train", "batch_policy", K::String, 0, 0, {"fixed", "goodput"}, LOOM_MEMBER(train, batch_policy), "fixed: every step trains train.global_batch sequences; goodput: the global batch is chosen every train.batch_every steps, within [batch_min, batch_max], to maximise Pollux's goodput from the measured step time and gradient noise scale (changing accumulation, micro_batch kept); train.steps then counts steps of train.global_batch, i.e. the run trains steps x global_batch sequences, and the learning-rate schedule follows the sequences trained (docs/batch_size.md)"},
      {"train", "batch_min", K::IntOrAuto, 1, kIntMax, {}, LOOM_MEMBER(train, batch_min), "goodput: the smallest global batch, a multiple of micro_batch*dp; auto = train.global_batch"},
      {"train", "batch_max", K::IntOrAuto, 1, kIntMax, {}, LOOM_MEMBER(train, batch_max), "goodput: the largest global batch, a multiple of micro_batch*dp; auto = 8 x train.global_batch"},
      {"train", "batch_every", K::Int64, 1, kHuge, {}, LOOM_MEMBER(train, batch_every), "goodput: steps between two decisions on the global batch"},
      {"train", "batch_lr_rule", K::String, 0, 0, {"linear", "sqrt", "adascale"}, LOOM_MEMBER(train, batch_lr_rule), "goodput: the learning rate's factor at batch M against train.global_batch M0: linear M/M0, sqrt (M/M0)^0.5 (the square-root rule for Adam), or adascale: AdaScale's gain from the noise scale, between 1 and M/M0"},

      {"optim", "lr", K::Float, 0, kInf, {}, LOOM_MEMBER(optim, lr), "peak learning rate (after warmup)"},
      {"optim", "min_lr", K::Float, 0, kInf, {}, LOOM_MEMBER(optim, min_lr), "learning rate at the end of the decay (optim.lr_decay), reached at optim.decay_steps"},
      {"optim", "warmup_steps", K::Int64, 0, kHuge, {}, LOOM_MEMBER(optim, warmup_steps), "linear warmup steps from lr/warmup_steps to lr"},
      {"optim", "lr_decay", K::String, 0, 0, {"cosine", "linear", "wsd", "inverse_sqrt", "constant"}, LOOM_MEMBER(optim, lr_decay), "the learning rate after warmup: cosine or linear from lr down to min_lr at optim.decay_steps; wsd (warmup-stable-decay): lr, then in the last optim.wsd_decay_steps steps before optim.decay_steps down to min_lr along optim.wsd_shape; inverse_sqrt: lr * sqrt(max(1, warmup_steps) / step), not below min_lr; constant: lr (min_lr unused). After optim.decay_steps: min_lr"},
      {"optim", "decay_steps", K::IntOrAuto, 1, kIntMax, {}, LOOM_MEMBER(optim, decay_steps), "the step at which the decay reaches min_lr (counted from the start, warmup included, as Megatron's --lr-decay-iters), or auto = train.steps"},
      {"optim", "wsd_decay_steps", K::IntOrAuto, 1, kIntMax, {}, LOOM_MEMBER(optim, wsd_decay_steps), "wsd: the cooldown's length in steps, ending at optim.decay_steps, or auto = a fifth of the steps from warmup to optim.decay_steps"},
      {"optim", "wsd_shape", K::String, 0, 0, {"linear", "cosine", "sqrt", "exponential"}, LOOM_MEMBER(optim, wsd_shape), "wsd: the cooldown's shape from lr to min_lr over its fraction f of the way: linear (1 - f), cosine ((1 + cos(pi f)) / 2), sqrt (1 - sqrt(f)) or exponential (2 * 0.5^f - 1, Megatron's)"},
      {"optim", "weight_decay", K::Float, 0, kInf, {}, LOOM_MEMBER(optim, weight_decay), "decoupled AdamW weight decay on matrices and embeddings (not biases or LayerNorm)"},
      {"optim", "beta1", K::Float, 0, 0.999999999, {}, LOOM_MEMBER(optim, beta1), "Adam first-moment decay, in [0, 1)"},
      {"optim", "beta2", K::Float, 0, 0.999999999, {}, LOOM_MEMBER(optim, beta2), "Adam second-moment decay, in [0, 1)"},
      {"optim", "eps", K::Float, 1e-30, 1, {}, LOOM_MEMBER(optim, eps), "Adam epsilon, > 0"},
      {"optim", "offload", K::String, 0, 0, {"none", "cpu"}, LOOM_MEMBER(optim, offload), "cpu: the fp32 master weights, Adam moments and update live in host memory and run on the CPU (ZeRO-Offload); the device keeps the compute weights and gradients"},
      {"optim", "grad_clip", K::Float, 0, kInf, {}, LOOM_MEMBER(optim, grad_clip), "clip the global gradient norm to this value; 0 disables"},

      {"data", "train", K::String, 0, 0, {}, LOOM_MEMBER(data, train), "training data: a `loom prep` directory, a shard file, a directory or glob of shards, or a Megatron PREFIX; or a weighted blend of them, \"0.7 data/web 0.3 data/code\" (docs/data.md, \"Blends\")"},
      {"data", "val", K::String, 0, 0, {}, LOOM_MEMBER(data, val), "validation data, same forms as data.train (a `loom prep` directory gives its val split)"},
      {"data", "val_fraction", K::Float, 0, 0.5, {}, LOOM_MEMBER(data, val_fraction), "instead of data.val: hold out the last fraction of data.train's tokens (of each part's, for a blend) for validation and train on the rest, as Megatron's --split does (a token boundary, not a document's); 0: none"},
      {"data", "format", K::String, 0, 0, {"auto", "text", "loom", "llmc", "megatron"}, LOOM_MEMBER(data, format), "auto detects by magic; text = any file read as bytes (vocab 256); see docs/data.md"},

      {"checkpoint", "dir", K::String, 0, 0, {}, LOOM_MEMBER(checkpoint, dir), "checkpoint directory (empty: no checkpoints)"},
      {"checkpoint", "every", K::Int64, 0, kHuge, {}, LOOM_MEMBER(checkpoint, every), "save every N steps (0: only at the end)"},
      {"checkpoint", "keep_last", K::Int, 1, 1 << 20, {}, LOOM_MEMBER(checkpoint, keep_last), "complete checkpoints kept; older ones are pruned, except the last clean one (saved before the run first went non-finite or diverged), which is always kept"},
      {"checkpoint", "resume", K::String, 0, 0, {}, LOOM_MEMBER(checkpoint, resume), "auto (the checkpoint `latest` names, else the newest complete one), never, or a checkpoint PATH"},
      {"checkpoint", "allow_changes", K::Bool, 0, 0, {}, LOOM_MEMBER(checkpoint, allow_changes), "resume even though train.seed or the training data changed since the checkpoint (the sample order, or the samples at the saved positions, then differ from the saved run's)"},

      {"checkpoint", "async", K::Bool, 0, 0, {}, LOOM_MEMBER(checkpoint, async), "copy the state to host memory and write it from a background thread while training continues (the next save, or the end, waits for it)"},
      {"log", "dir", K::String, 0, 0, {}, LOOM_MEMBER(log, dir), "run directory: metrics.jsonl and run records"},
      {"log", "every", K::Int64, 1, kHuge, {}, LOOM_MEMBER(log, every), "log a metrics line every N steps"},
      {"log", "eval_every", K::Int64, 0, kHuge, {}, LOOM_MEMBER(log, eval_every), "compute val_loss on data.val (and log.choices' accuracy) every N steps and at the end (0: never)"},
      {"log", "eval_batches", K::Int, 1, 1 << 20, {}, LOOM_MEMBER(log, eval_batches), "global batches of data.val per evaluation (the same ones each time)"},
      {"log", "choices", K::String, 0, 0, {}, LOOM_MEMBER(log, choices), "multiple-choice items scored at every evaluation (log.eval_every), logged as choice_acc and choice_acc_norm: llm.c's eval file (hellaswag_val.bin) or HellaSwag's JSON lines (tokenized with data.train's tokenizer); \"\": none (docs/pretrained.md, loom eval --choices)"},
      {"log", "choices_limit", K::Int64, 0, kHuge, {}, LOOM_MEMBER(log, choices_limit), "score only the first N items of log.choices (0: all)"},
      {"log", "tensorboard", K::Bool, 0, 0, {}, LOOM_MEMBER(log, tensorboard), "write TensorBoard event files (events.out.tfevents.*) to log.dir"},
      {"log", "trace", K::Bool, 0, 0, {}, LOOM_MEMBER(log, trace), "write a Chrome trace (log.dir/trace_rank<R>.json; trace_s<N>_rank<R>.json, the next free N, when log.dir holds one already; for chrome://tracing or Perfetto) of the phases of log.trace_steps steps"},
      {"log", "trace_steps", K::Int64, 1, 1000, {}, LOOM_MEMBER(log, trace_steps), "steps traced with log.trace, from the second step of the run (the first warms up)"},
      {"log", "noise_scale", K::Bool, 0, 0, {}, LOOM_MEMBER(log, noise_scale), "measure the gradient noise scale B_simple (McCandlish et al. 2018) from the dp ranks' own gradient norms, or a single rank's first micro-batch, and log it (b_simple, grad_norm_small); not under ZeRO 2/3 with pipeline stages"},
      {"log", "noise_ema", K::Float, 0, 0.9999, {}, LOOM_MEMBER(log, noise_ema), "decay per step of the noise scale's moving averages of |G|^2 and tr(S)"},

      {"lora", "rank", K::Int, 0, 4096, {}, LOOM_MEMBER(lora, rank), "LoRA adapters' rank r; 0: no adapters (every weight trains). With r > 0 the base model is frozen (no gradients, no optimizer state) and checkpoints hold only what trains"},
      {"lora", "alpha", K::Float, 1e-9, 1e9, {}, LOOM_MEMBER(lora, alpha), "the adapters' branch is scaled by alpha / rank"},
      {"lora", "dropout", K::Float, 0, 0.9, {}, LOOM_MEMBER(lora, dropout), "dropout probability on each adapter's input while training (inverted dropout; the masks are a function of train.seed, the step and the global micro-batch, so any layout and a resume draw the same ones)"},
      {"lora", "targets", K::String, 0, 0, {}, LOOM_MEMBER(lora, targets), "comma-separated linear layers that get adapters: qkv, attn_proj, fc, mlp_proj"},
      {"lora", "train_embeddings", K::Bool, 0, 0, {}, LOOM_MEMBER(lora, train_embeddings), "with LoRA: wte and wpe train too (else frozen)"},
      {"lora", "train_layernorm", K::Bool, 0, 0, {}, LOOM_MEMBER(lora, train_layernorm), "with LoRA: the LayerNorms train too (else frozen)"},
      {"lora", "quantize", K::String, 0, 0, {"none", "int8", "nf4"}, LOOM_MEMBER(lora, quantize), "QLoRA: the frozen base's linear weights stored blockwise-quantized (int8 or 4-bit NormalFloat, one fp32 scale per block) and dequantized before each matmul; none: in the compute dtype"},
      {"lora", "quant_block", K::Int, 2, 1 << 20, {}, LOOM_MEMBER(lora, quant_block), "elements per quantization block (one scale each); even"},
  };
}
#undef LOOM_MEMBER

std::string format_double(double v) {
  // Whole numbers as such (600.0, not %g's shortest 6e+02: people read these recipes).
  char buf[64];
  if (v == std::floor(v) && std::fabs(v) < 1e15) {
    std::snprintf(buf, sizeof buf, "%.1f", v);
    return buf;
  }
  // Otherwise the shortest decimal that reads back to the same double, so recipes round-trip.
  for (int prec = 1; prec <= 17; ++prec) {
    std::snprintf(buf, sizeof buf, "%.*g", prec, v);
    if (std::strtod(buf, nullptr) == v) break;
  }
  std::string s = buf;
  // Keep it a float in YAML's eyes ("1" would read back as an integer; harmless but unclear).
  if (s.find_first_of(".eEn") == std::string::npos) s += ".0";
  return s;
}

}  // namespace

std::string Field::type_name() const {
  switch (kind) {
    case FieldKind::Int:
    case FieldKind::Int64: return "integer";
    case FieldKind::UInt64: return "unsigned integer";
    case FieldKind::Float: return "number";
    case FieldKind::String: return "string";
    case FieldKind::IntOrAuto: return "integer or auto";
    case FieldKind::FloatOrAuto: return "number or auto";
    case FieldKind::Bool: return "true | false";
  }
  return "?";
}

const std::vector<Field>& recipe_fields() {
  static const std::vector<Field> fields = make_fields();
  return fields;
}

const std::vector<std::string>& recipe_sections() {
  static const std::vector<std::string> s = {"model", "parallel", "train", "optim", "data", "checkpoint", "log", "lora"};
  return s;
}

const Field* find_field(const std::string& section, const std::string& key) {
  for (const Field& f : recipe_fields())
    if (f.section == section && f.key == key) return &f;
  return nullptr;
}

std::string field_value_string(const Field& f, const Recipe& rc) {
  Recipe& r = const_cast<Recipe&>(rc);  // member() only takes the address
  void* p = f.member(r);
  switch (f.kind) {
    case FieldKind::Int: return std::to_string(*static_cast<int*>(p));
    case FieldKind::Int64: return std::to_string(*static_cast<int64_t*>(p));
    case FieldKind::UInt64: return std::to_string(*static_cast<uint64_t*>(p));
    case FieldKind::Float: return format_double(*static_cast<double*>(p));
    case FieldKind::FloatOrAuto: {
      const double v = *static_cast<double*>(p);
      return v == 0 ? "auto" : format_double(v);
    }
    case FieldKind::IntOrAuto: {
      int v = *static_cast<int*>(p);
      return v == 0 ? "auto" : std::to_string(v);
    }
    case FieldKind::String: return *static_cast<std::string*>(p);
    case FieldKind::Bool: return *static_cast<bool*>(p) ? "true" : "false";
  }
  return "";
}

}  // namespace loom
