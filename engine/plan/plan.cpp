#include "engine/plan/plan.hpp"

#include <sched.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <stdexcept>

#include "engine/checkpoint/lora_manifest.hpp"
#include "engine/model/gpt_memory.hpp"
#include "engine/model/param_table.hpp"
#include "engine/plan/host_staging.hpp"
#include "engine/plan/zero_unit_buffers.hpp"
#include "engine/pretrained/load_pretrained.hpp"
#include "kernels/backend.hpp"
#include "parallel/mpi_communicator.hpp"
#include "parallel/pipeline_schedule.hpp"
#include "parallel/ring_allreduce.hpp"

namespace loom {
namespace {

constexpr double MB = 1024.0 * 1024.0;

// Ring collective over k ranks of `bytes` each: all-reduce moves 2(k-1)/k of the data, with
// 2(k-1) latency steps (reduce-scatter + all-gather).
double all_reduce_s(double bytes, int k, double gbs, double alpha_us) {
  if (k <= 1) return 0;
  return 2.0 * (k - 1) * alpha_us * 1e-6 + 2.0 * (k - 1) / k * bytes / (gbs * 1e9);
}

// A group of `size` ranks `stride` apart (Megatron order: tp fastest, then dp, then pp) stays
// inside a node when it spans no more than a node's ranks.
bool intra_node(int size, int stride, int per_node) { return size <= 1 || size * stride <= per_node; }

// The OpenMP threads a rank runs on this machine (engine/train/cpu_threads.hpp's choice):
// OMP_NUM_THREADS where it is set, else the rank's share of the CPUs this process may run on.
int cpu_threads_per_rank(int ranks_per_node) {
  if (const char* v = std::getenv("OMP_NUM_THREADS"); v && std::atoi(v) > 0) return std::atoi(v);
  cpu_set_t set;
  CPU_ZERO(&set);
  const int cpus = sched_getaffinity(0, sizeof set, &set) == 0 ? CPU_COUNT(&set) : 1;
  return std::max(1, cpus / std::max(1, ranks_per_node));
}

}  // namespace

std::vector<std::string> device_names() { return {"cpu", "a100-40g", "a100-80g", "h100-80g"}; }

DeviceSpec device_spec(const std::string& name) {
  DeviceSpec d;
  d.name = name;
  if (name == "cpu") {
    // This kind of machine (docs/plan.md): the node's sgemm rate measured now (512^3, the size
    // of the model's matmuls), the training step's share of it (0.85, calibrated on one 1-rank
    // run of tests/cli/plan_matches_runs.sh; the other layouts there are out of sample), the
    // process baseline (MPI, OpenBLAS, OpenMP, the mapped data), and Open MPI's shared-memory
    // collectives (loom bench comm: ~3 us, ~5 GB/s bus bandwidth).
    d.cpu = true;
    d.memory_gb = 24;
    d.fp32_flops = measure_sgemm_flops(512, 12);  // best of 12: robust to a busy moment
    // bf16 through oneDNN (train.precision bf16); fp16 has no fast CPU matmul (fp32 rate), and
    // neither has bf16 where this CPU's oneDNN cannot run it (AVX2: widened to sgemm, at the fp32
    // rate and efficiency; its measured gemm rate, conversions included, had bf16 steps predicted
    // 44-112% long on such a machine).
    d.bf16_flops = cpu_matmul_widens(DType::bf16) ? 0 : measure_bf16_gemm_flops(512, 12);
    d.efficiency = 0.85;
    // bf16: the matmuls got ~4x faster, the rest of the step did not (scripts/bench_cpu.sh:
    // Loom bf16 sustains ~0.66 of the bf16 gemm rate on configs/bench-cpu.yaml, fp32 ~0.85 of sgemm).
    d.efficiency16 = 0.66;
    d.half_rows = 32;
    // The baseline: a 1-layer d_model 64 model's peak RSS, 1-2 ranks, 1-2 threads (2026-11-26):
    // 35.3-36.7 MB in fp32, 38.2-39.9 MB in bf16 (oneDNN's library and its JIT-compiled
    // kernels); fp16 widens to sgemm and keeps the fp32 figure. (The 62 and 50 MB used before
    // also held rank 0's start-up gemm measurement, 28 or 14 MB of matrices, which ran after
    // the model was built and so added to the peak; it now runs before.)
    d.runtime_mb = 37;
    d.runtime_bf16_mb = 40;
    d.intra_gbs = 5;
    d.intra_alpha_us = 3;
    d.inter_gbs = 1;
    d.inter_alpha_us = 20;
    return d;
  }
  // Datasheet rates (fp32 without tensor cores, as Loom's present CUDA backend; bf16 dense
  // tensor-core), NVLink/NVSwitch and 1 NIC per GPU (HDR 200 Gb/s on A100 nodes, NDR 400 Gb/s on H100),
  // with achievable bus bandwidths as NCCL reports them; CUDA context + cuBLASLt + NCCL ~1 GB.
  d.efficiency = 0.5;
  d.half_rows = 512;
  d.runtime_mb = 1024;
  if (name == "a100-40g" || name == "a100-80g") {
    d.memory_gb = name == "a100-40g" ? 40 : 80;
    d.fp32_flops = 19.5e12;
    d.bf16_flops = 312e12;
    d.intra_gbs = 230;
    d.intra_alpha_us = 3.4;  // per ring step: NCCL's own model (tuning.cc, Ring/Simple over NVLink)
    d.inter_gbs = 22;
    d.inter_alpha_us = 14;   // NCCL's Ring/Simple over the network
  } else if (name == "h100-80g") {
    d.memory_gb = 80;
    d.fp32_flops = 67e12;
    d.bf16_flops = 989e12;
    d.intra_gbs = 360;
    d.intra_alpha_us = 3.4;
    d.inter_gbs = 45;
    d.inter_alpha_us = 14;
  } else {
    std::string known;
    for (const auto& n : device_names()) known += (known.empty() ? "" : ", ") + n;
    throw std::runtime_error("--gpu " + name + ": unknown device (expected one of " + known + ")");
  }
  return d;
}

Prediction predict(const Recipe& r, const Cluster& cl) {
  const auto& m = r.model;
  const int tp = r.parallel.tp, pp = r.parallel.pp;
  const int world = cl.world();
  if (world % (tp * pp) != 0)
    throw std::runtime_error("parallel.tp x parallel.pp = " + std::to_string(tp * pp) + " does not divide the " +
                             std::to_string(world) + " ranks of the cluster");
  const int dp = world / (tp * pp);
  if (m.n_head % tp != 0) throw std::runtime_error("parallel.tp=" + std::to_string(tp) + " must divide model.n_head");
  if (m.n_layer % pp != 0 && r.parallel.pp_layers == "auto")
    throw std::runtime_error("parallel.pp=" + std::to_string(pp) + " must divide model.n_layer");
  const int B = r.train.micro_batch, T = m.seq_len;
  const int global = r.train.global_batch > 0 ? r.train.global_batch : B * dp;
  if (global % (B * dp) != 0)
    throw std::runtime_error("train.global_batch=" + std::to_string(global) + " is not a multiple of micro_batch x dp = " +
                             std::to_string(B * dp));
  const int accum = global / (B * dp);
  GptShape shape = GptShape::make(m.n_layer, m.n_head, m.d_model, m.vocab_size, m.seq_len, 128 * tp);
  // LoRA: the parameter table holds the trainable adapters (and what lora.train_* adds); the
  // frozen base is counted apart, dense or quantized; the FLOPs drop the base's weight gradients.
  shape.lora = lora_spec(r.lora);
  const bool bf16 = r.train.precision != "fp32";  // bf16 or fp16: 16-bit compute
  const size_t act_bytes = bf16 ? 2 : 4;
  const double flat_bytes = bf16 ? 4 + 2 : 4;  // per parameter: the fp32 master and, in 16 bits, its compute copy

  Prediction p;
  p.tp = tp;
  p.pp = pp;
  p.dp = dp;
  p.micro_batch = B;
  p.zero = r.parallel.zero;
  p.grad_accum = accum;
  p.recompute = r.train.recompute;
  // Memory: the largest over the pipeline stages.
  Recipe staged = r;
  staged.parallel.dp = dp;
  const std::vector<int> layers = staged.stage_layers();
  // The most micro-batches a step accumulates: goodput's train.batch_max, else the fixed batch's.
  const int accum_max = std::max(accum, staged.grad_accum_max());
  size_t largest_params = 0;
  for (int s = 0, first = 0; s < pp; first += layers[size_t(s)], ++s) {
    const StageSpec spec{first, layers[size_t(s)], s == 0, s == pp - 1};
    const ParamTable table = gpt_param_table(shape, 0, tp, spec);
    const double P = double(table.total());
    const ParamTable frozen_table = gpt_param_table(shape, 0, tp, spec, ParamSet::Frozen);  // empty without LoRA
    const double frozen = double(gpt_frozen_bytes(frozen_table, shape.lora, act_bytes));
    largest_params = std::max(largest_params, table.total());
    // The trainer allocates the in-flight activations of its largest accumulation.
    const int in_flight = parallel::pipeline_in_flight(s, pp, accum_max);
    // The backends' attention_saved_bytes: the CPU keeps the probabilities in the compute dtype,
    // CUDA the fp32 log-sum-exp.
    const size_t att_saved = cl.device.cpu ? size_t(B) * (m.n_head / tp) * T * T * act_bytes
                                           : size_t(B) * (m.n_head / tp) * T * 4;
    const GptActivationBytes a = gpt_activation_bytes(shape, B, tp, spec.n_layers, spec.last, in_flight, att_saved,
                                                      act_bytes, recompute_from_name(r.train.recompute));
    MemoryBreakdown mem;
    mem.stage = s;
    mem.in_flight = in_flight;
    mem.frozen = frozen / MB;
    const int zero = r.parallel.zero;
    const double owned = zero >= 1 ? P / dp : P;
    double unit_working = 0;  // bytes of ZeRO-2/3's per-unit buffers
    const bool reduce16 = r.parallel.grad_reduce_dtype == "bf16";
    if (zero <= 1) {
      // The fp32 master parameters and, under bf16/fp16, their compute copy; fp32 gradients.
      mem.params = (P * flat_bytes + frozen) / MB;
      mem.grads = P * 4 / MB;
      // ZeRO-1's reduce-scatter shard (fp32); with parallel.grad_reduce_dtype bf16 a bf16 copy of
      // the gradients to reduce and, sharded, a bf16 shard beside the fp32 one.
      mem.comm_buffers = ((zero == 1 ? owned * (4 + (reduce16 ? 2 : 0)) : 0) + (reduce16 ? P * 2 : 0)) / MB;
    } else {
      // ZeRO-2/3 (engine/optim/sharded_state.hpp): per-unit buffers, at the most held at once.
      const UnitPeaks u = unit_peaks(param_units(table), spec, r.parallel.prefetch, accum_max,
                                     pp > 1 && (spec.first || spec.last), dp, reduce16);
      // zero 2: the model's flat parameters (and compute copy); zero 3: the fp32 master shard
      // (and its compute copy) and the gathered units, in the compute dtype.
      mem.params = (zero == 2 ? P * flat_bytes : owned * flat_bytes + u.weights * act_bytes) / MB +
                   frozen / MB;
      // The fp32 gradient shard and the units' fp32 gradient buffers.
      mem.grads = (owned * 4 + u.grads) / MB;
      // The reductions' receive parts and 16-bit copies.
      mem.comm_buffers = u.staging / MB;
      // A unit's reduce-scatter over host buffers (the CPU; NCCL's are its own), on the
      // communication thread during the backward pass: the ring's bounded round buffer (in the
      // reduction's dtype: halves are summed by the user op, kDefaultHalfReduce), or
      // MPI_Reduce_scatter's own copy of the message (parallel.allreduce mpi, or auto below the
      // ring's threshold). Chosen here for the whole unit; the communicator chooses per bucket,
      // and a unit larger than parallel.bucket_mb goes in several, so this errs high.
      if (dp > 1 && cl.device.cpu) {
        const double msg = u.largest * (reduce16 ? 2 : 4);
        const std::string& algo = r.parallel.allreduce;
        const bool ring = algo != "mpi" && (algo != "auto" || msg >= double(parallel::kRingMinBytes));
        const double reduce_scratch = ring ? double(parallel::ring_reduce_scatter_scratch_bytes(
                                    size_t(std::ceil(u.largest / dp)), dp, reduce16 ? DType::bf16 : DType::f32,
                                    parallel::default_ring_options(intra_node(dp, tp, cl.per_node))))
                              : msg;
        mem.comm_buffers += reduce_scratch / MB;
      }
      unit_working = (zero == 3 ? u.weights * act_bytes : 0) + u.grads + mem.comm_buffers * MB;
    }
    // Adam m and v (fp32); with optim.offload in host memory, with the master and a gradient copy.
    const bool offload = r.optim.offload == "cpu";
    mem.optimizer = offload ? 0 : owned * 8 / MB;
    mem.optimizer_host = offload ? owned * 16 / MB : 0;
    mem.activations = (double(a.total(in_flight)) + double(a.ints)) / MB;
    // cuBLASLt's; on the CPU the 16-bit ops' fp32 scratch (kernels/cpu/scratch_need.hpp: large
    // where oneDNN cannot run the dtype's matmuls, bf16 before AVX512_BF16 or fp16 before
    // AVX512_FP16, and every linear layer widens). Worked out for the machine `loom plan` runs
    // on (its oneDNN, its threads): the trainer's own check runs where the job runs.
    const DType compute = r.train.precision == "bf16" ? DType::bf16 : r.train.precision == "fp16" ? DType::f16
                                                                                               : DType::f32;
    mem.workspace = cl.device.cpu ? double(cpu_scratch_bytes(gpt_cpu_scratch_shapes(
                                        shape, B, tp, spec.n_layers, spec.last, compute,
                                        cpu_threads_per_rank(cl.per_node)))) / MB
                                  : 32;
    // Host staging (engine/plan/host_staging.hpp): what the first step adds after the initial
    // parameters' buffers are gone (ZeRO-2/3's per-unit buffers, the CPU's scratch) is taken off.
    const double step_transients = unit_working + (cl.device.cpu ? mem.workspace * MB : 0);
    const double staging = host_staging_bytes(r, shape, table, s, dp, step_transients) / MB;
    mem.staging = cl.device.cpu ? staging : 0;
    mem.runtime = r.train.precision == "bf16" && cl.device.runtime_bf16_mb > 0 ? cl.device.runtime_bf16_mb
                                                                              : cl.device.runtime_mb;
    mem.host_is_device = cl.device.cpu;
    // While the weights go in (Trainer::build_model): the model's own buffers are there (its
    // flat parameters and gradients as ModelHolds allows: both at zero 0/1, the parameters at
    // zero 2, neither at zero 3, whose shards and unit buffers the optimizer makes later; the
    // frozen base; the activations), the optimizer's state and communication buffers not yet.
    // On top: one frozen tensor in flight: LoRA's fp32 host buffer and 16-bit staging buffer
    // (gpt_frozen_load_elems), and with model.init_from the source's fp32 copy of the global
    // tensor being read. Host memory counts on the CPU only. (The trainable parameters go in
    // after the optimizer is made: host staging above.)
    const FrozenLoadElems fl = gpt_frozen_load_elems(frozen_table, shape.lora, bf16);
    double in_flight_bytes = double(fl.backend) * 4;
    if (cl.device.cpu) {
      const double read_frozen = m.init_from.empty() ? 0 : double(pretrained_read_bytes(frozen_table));
      in_flight_bytes = double(fl.host) * 4 + in_flight_bytes + read_frozen;
    }
    const double held = (zero <= 2 ? P * flat_bytes : 0) + (zero <= 1 ? P * 4 : 0) + frozen;
    // (The CPU's scratch comes with the first pass, after the loading.)
    mem.loading =
        held / MB + mem.activations + (cl.device.cpu ? 0 : mem.workspace) + mem.runtime + in_flight_bytes / MB;
    if (mem.total() > p.memory.total()) p.memory = mem;
  }
  const double capacity_mb = cl.device.memory_gb * 1024 / (cl.device.cpu ? cl.per_node : 1);
  p.fits = p.memory.total() <= capacity_mb * 0.95;

  // Time. Compute: the model FLOPs of the step, shared by all ranks; a rank's rate is its
  // device's (CPU: its share of the node's cores).
  const double tokens = double(global) * T;
  p.flops_per_step = shape.flops_per_token() * tokens;
  // Small matmuls run below the device's rate: efficiency halves at half_rows rows.
  const bool fast16 = bf16 && cl.device.bf16_flops > 0 && !(cl.device.cpu && r.train.precision == "fp16");
  const double peak = fast16 ? cl.device.bf16_flops : cl.device.fp32_flops;
  const double rows = double(B) * T;
  const double eff = fast16 && cl.device.efficiency16 > 0 ? cl.device.efficiency16 : cl.device.efficiency;
  const double rate = peak * eff * rows / (rows + cl.device.half_rows) / (cl.device.cpu ? cl.per_node : 1);
  const double per_micro = shape.flops_per_token() * double(B) * T / (tp * pp) / rate;
  // Recomputation re-runs forward work in backward: full, the whole forward; selective,
  // attention's scores and softmax (the 12LCT term's forward third). The forward pass: 2 FLOPs
  // per weight (frozen or not: LoRA's frozen base skips only its weight gradients) and the
  // attention term's forward third, so 1/3 of the step without LoRA and about half with it.
  double recompute_extra = 0;
  const double forward_flops = 2.0 * double(shape.matmul_params() + shape.adapter_params()) +
                               4.0 * m.n_layer * double(m.d_model) * T;
  if (r.train.recompute == "full") recompute_extra = forward_flops / shape.flops_per_token();
  if (r.train.recompute == "selective")
    recompute_extra = (4.0 * m.n_layer * double(m.d_model) * T) / shape.flops_per_token();
  const double per_micro_run = per_micro * (1 + recompute_extra);
  p.compute_s = per_micro_run * accum;
  p.bubble_s = per_micro_run * (pp - 1);  // 1F1B: (pp - 1) micro-batch slots idle per step
  const int Ls = (m.n_layer + pp - 1) / pp;
  const double act_msg = double(B) * T * m.d_model * act_bytes;
  const bool tp_in = intra_node(tp, 1, cl.per_node), dp_in = intra_node(dp, tp, cl.per_node),
             pp_in = intra_node(pp, tp * dp, cl.per_node);
  auto bw = [&](bool in) { return in ? cl.device.intra_gbs : cl.device.inter_gbs; };
  auto al = [&](bool in) { return in ? cl.device.intra_alpha_us : cl.device.inter_alpha_us; };
  // Tensor parallelism: two all-reduces per layer forward, two backward, per micro-batch (not
  // overlapped); the vocab-parallel loss adds three small ones.
  p.tp_comm_s = tp > 1 ? accum * 4.0 * Ls * all_reduce_s(act_msg, tp, bw(tp_in), al(tp_in)) : 0;
  p.tp_bytes = tp > 1 ? accum * 4.0 * Ls * 2.0 * (tp - 1) / tp * act_msg : 0;
  // Pipeline: one activation forward and one gradient backward per micro-batch per boundary.
  p.pp_comm_s = pp > 1 ? accum * 2.0 * (al(pp_in) * 1e-6 + act_msg / (bw(pp_in) * 1e9)) : 0;
  p.pp_bytes = pp > 1 ? accum * 2.0 * act_msg : 0;
  // Data parallelism: the gradients reduced in parallel.grad_reduce_dtype, overlapped with the
  // last micro-batch's backward (2/3 of its compute); what does not fit behind it is exposed.
  // Zero 0 all-reduces them. ZeRO-1 reduce-scatters them the same way, then all-gathers the
  // updated fp32 parameters after the step, exposed (nothing is left to hide it behind).
  const double grad_bytes = double(largest_params) * (r.parallel.grad_reduce_dtype == "bf16" ? 2 : 4);
  const double dp_s = all_reduce_s(grad_bytes, dp, bw(dp_in), al(dp_in));
  const double hidden = r.parallel.overlap_grad_reduce ? per_micro * 2.0 / 3.0 : 0;
  p.dp_bytes = dp > 1 ? 2.0 * (dp - 1) / dp * grad_bytes : 0;
  p.dp_comm_exposed_s = std::max(0.0, dp_s - hidden);
  if (r.parallel.zero == 1 && dp > 1) {
    const double fp32_bytes = double(largest_params) * 4;
    p.dp_bytes = (dp - 1.0) / dp * (grad_bytes + fp32_bytes);
    p.dp_comm_exposed_s = std::max(0.0, dp_s / 2 - hidden) + all_reduce_s(fp32_bytes, dp, bw(dp_in), al(dp_in)) / 2;
  }
  if (r.parallel.zero >= 2 && dp > 1) {
    // Every micro-batch reduce-scatters its gradients (half an all-reduce's bytes), hidden behind
    // that micro-batch's backward. ZeRO-2 then all-gathers the updated parameters once, after the
    // step (exposed); zero 3 gathers them (compute dtype) for every micro-batch's forward and
    // again for its backward, hidden behind the compute with prefetch, exposed without.
    const double rs_s = dp_s / 2, param_bytes = double(largest_params) * act_bytes;
    const double ag_s = all_reduce_s(param_bytes, dp, bw(dp_in), al(dp_in)) / 2;
    double per_micro_exposed = std::max(0.0, rs_s - per_micro * 2.0 / 3.0), per_step_exposed = 0;
    p.dp_bytes = accum * (dp - 1.0) / dp * grad_bytes;
    if (r.parallel.zero == 2) {
      per_step_exposed = ag_s;
      p.dp_bytes += (dp - 1.0) / dp * param_bytes;
    } else {
      per_micro_exposed += r.parallel.prefetch ? std::max(0.0, 2 * ag_s - per_micro) : 2 * ag_s;
      p.dp_bytes += accum * 2.0 * (dp - 1) / dp * param_bytes;
    }
    p.dp_comm_exposed_s = accum * per_micro_exposed + per_step_exposed;
  }
  p.step_s = p.compute_s + p.bubble_s + p.tp_comm_s + p.pp_comm_s + p.dp_comm_exposed_s;
  p.tokens_per_s = tokens / p.step_s;
  p.mfu = p.flops_per_step / p.step_s / (peak * (cl.device.cpu ? cl.nodes : world));
  return p;
}

std::vector<Prediction> search(const Recipe& r, const Cluster& cl) {
  std::vector<Prediction> out;
  const int world = cl.world();
  const int global = r.train.global_batch > 0 ? r.train.global_batch : r.train.micro_batch * world;
  for (int tp = 1; tp <= std::min(cl.per_node, r.model.n_head); ++tp) {
    if (r.model.n_head % tp || world % tp) continue;
    for (int pp = 1; pp <= r.model.n_layer; ++pp) {
      if (r.model.n_layer % pp || world % (tp * pp)) continue;
      const int dp = world / (tp * pp);
      for (int mb = 1; mb <= global / dp; ++mb) {
        if (global % (mb * dp)) continue;
        for (int zero : {0, 1, 2, 3})
         for (const char* rc : {"none", "selective", "full"}) {
          if (zero >= 1 && dp == 1) continue;
          Recipe c = r;
          c.parallel.tp = tp;
          c.parallel.pp = pp;
          c.parallel.dp = dp;
          c.parallel.pp_layers = "auto";
          c.parallel.zero = zero;
          c.train.micro_batch = mb;
          c.train.global_batch = global;
          c.train.recompute = rc;
          try {
            out.push_back(predict(c, cl));
          } catch (const std::exception&) {
          }
        }
      }
    }
  }
  std::stable_sort(out.begin(), out.end(), [](const Prediction& a, const Prediction& b) {
    if (a.fits != b.fits) return a.fits;
    if (a.tokens_per_s != b.tokens_per_s) return a.tokens_per_s > b.tokens_per_s;
    return a.memory.total() < b.memory.total();
  });
  return out;
}

}  // namespace loom
