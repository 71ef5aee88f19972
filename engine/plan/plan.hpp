#pragma once
// `loom plan`: predicts, before a job is submitted, each rank's memory, the FLOPs and
// communication of a step, and the step time, for a recipe on a given cluster; and searches the
// layouts (tp, pp, dp, micro-batch, ZeRO) for the fastest one that fits. Memory comes from the
// same functions that size the real buffers (the parameter table, gpt_activation_bytes, the
// 1F1B in-flight count, ZeRO's shard); time from the model-FLOPs formula and an alpha-beta
// communication model with the device rates in docs/plan.md. No MPI: pure arithmetic.
#include <algorithm>
#include <string>
#include <vector>

#include "engine/config/recipe.hpp"

namespace loom {

struct DeviceSpec {
  std::string name;
  double memory_gb = 0;         // per device (GPU) or per node (CPU)
  double fp32_flops = 0;        // dense fp32 rate, per device (CPU: per node)
  double bf16_flops = 0;        // dense bf16 (tensor core) rate; 0 where there is none
  double efficiency = 0;        // fraction of the rate a training step sustains with large matmuls
  double efficiency16 = 0;      // the same at bf16 (0: as efficiency)
  double half_rows = 0;         // matmul rows (micro-batch x seq) at which efficiency halves
  double runtime_mb = 0;        // per-rank fixed cost: CUDA context + libraries, or the process baseline
  double runtime_bf16_mb = 0;   // the same for bf16 compute where it differs (0: runtime_mb)
  double intra_gbs = 0, intra_alpha_us = 0;  // collective bus bandwidth and latency inside a node
  double inter_gbs = 0, inter_alpha_us = 0;  // across nodes (per rank's share of the NICs)
  bool cpu = false;
};

// "a100-40g", "a100-80g", "h100-80g", "cpu" (this kind of machine: rates measured here).
DeviceSpec device_spec(const std::string& name);
std::vector<std::string> device_names();

struct Cluster {
  int nodes = 1, per_node = 1;  // ranks per node (GPUs per node)
  DeviceSpec device;
  int world() const { return nodes * per_node; }
};

struct MemoryBreakdown {  // MB, one rank (the largest over pipeline stages)
  int stage = 0, in_flight = 1;
  double params = 0, grads = 0, optimizer = 0, activations = 0, comm_buffers = 0, workspace = 0, staging = 0,
         runtime = 0;
  double frozen = 0;          // of params: LoRA's frozen base (dense or quantized), no gradients or state
  double optimizer_host = 0;  // optim.offload: master, moments and gradient copy in host memory
  bool host_is_device = false;  // CPU: host memory is the device's
  // While the model is built and its weights go in, before the optimizer exists: usually below
  // the step's peak, but not for LoRA with a large vocabulary (the frozen embedding's one-tensor
  // buffers). 0 where not worked out.
  double loading = 0;
  double step_total() const {
    return params + grads + optimizer + activations + comm_buffers + workspace + staging + runtime +
           (host_is_device ? optimizer_host : 0);
  }
  double total() const { return std::max(step_total(), loading); }
};

struct Prediction {
  int tp = 1, pp = 1, dp = 1, micro_batch = 1, zero = 0, grad_accum = 1;
  std::string recompute = "none";
  MemoryBreakdown memory;
  bool fits = true;
  double flops_per_step = 0;          // model FLOPs of one optimizer step, whole job
  double compute_s = 0, bubble_s = 0, tp_comm_s = 0, pp_comm_s = 0, dp_comm_exposed_s = 0;
  double tp_bytes = 0, pp_bytes = 0, dp_bytes = 0;  // per step, per rank, sent in each group
  double step_s = 0, tokens_per_s = 0, mfu = 0;
};

// The recipe's own layout (r.parallel, r.train.micro_batch) on `cluster`. Throws
// std::runtime_error naming the key if the layout cannot run there.
Prediction predict(const Recipe& r, const Cluster& cluster);

// Every valid (tp, pp, dp, micro_batch, zero, recompute) for the cluster (tp within a node, dividing
// n_head; pp dividing n_layer; micro-batches dividing the global batch), best predicted
// tokens/s first; those that do not fit last.
std::vector<Prediction> search(const Recipe& r, const Cluster& cluster);

std::string format_prediction(const Recipe& r, const Cluster& c, const Prediction& p);
std::string format_search(const std::vector<Prediction>& all, size_t top);

}  // namespace loom
