// The Trainer's model and optimizer: memory said before anything large is allocated, the
// parameters set a tensor at a time (model.init_from or the seed's init), and every rank agreeing
// on a failure before the collectives that follow.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <stdexcept>
#include <vector>

#include "engine/checkpoint/lora_manifest.hpp"
#include "engine/model/gpt_memory.hpp"
#include "engine/pretrained/load_pretrained.hpp"
#include "engine/pretrained/pretrained_source.hpp"
#include "engine/train/memory_check.hpp"
#include "engine/train/trainer.hpp"
#include "parallel/bucket_sizing.hpp"
#include "parallel/host_collectives.hpp"
#include "parallel/mpi_world.hpp"
#include "parallel/pipeline_schedule.hpp"

namespace loom {

// The model and its optimizer, after saying out of memory before anything large is allocated
// where the plan can tell. Either may fail on some ranks only (nodes differ): the ranks agree
// before going on to the collective calls that follow.
void Trainer::build_model(const std::vector<std::string>& hosts, const MemoryRoom& room) {
  const auto& m = r_.model;
  const int tp = r_.parallel.tp, pp = r_.parallel.pp, stage = groups_.coord().pp;
  // The vocabulary is padded to a multiple of 128 * tp: every rank gets an equal, aligned slice.
  GptShape shape = GptShape::make(m.n_layer, m.n_head, m.d_model, m.vocab_size, m.seq_len, 128 * tp);
  shape.lora = lora_spec(r_.lora);
  // Pipeline stage: contiguous blocks; the first stage embeds, the last computes the loss.
  const std::vector<int> per_stage = r_.stage_layers();
  StageSpec spec{0, per_stage[size_t(stage)], stage == 0, stage == pp - 1};
  for (int s = 0; s < stage; ++s) spec.first_layer += per_stage[size_t(s)];
  // goodput: the pipeline holds the activations of the largest batch's accumulation.
  const int slots = parallel::pipeline_in_flight(stage, pp, r_.grad_accum_max());
  const char* allocating = "the model (parameters, gradients, activations)";
  std::string error;
  try {
    if (backend_->name() == "cpu")
      check_host_memory_fits(r_, int(std::count(hosts.begin(), hosts.end(), hosts[size_t(rank_)])), room);
    // ZeRO-2 and 3: the optimizer's ShardedState holds the gradients (and at 3 the parameters).
    const int zero = r_.parallel.zero;
    const ModelHolds holds = zero >= 3 ? ModelHolds::Nothing : zero == 2 ? ModelHolds::Weights : ModelHolds::All;
    model_ = std::make_unique<Gpt>(*backend_, shape, r_.train.micro_batch,
                                   TensorParallel{groups_.coord().tp, tp, &groups_.device_tp()}, spec, slots,
                                   recompute_from_name(r_.train.recompute), compute_, holds);
    // With LoRA, the frozen base, a tensor at a time: from model.init_from, else the seed's init.
    std::unique_ptr<PretrainedSource> src;
    const auto t0 = std::chrono::steady_clock::now();
    if (!m.init_from.empty()) {
      allocating = "the pretrained weights (model.init_from)";
      src = open_pretrained(m.init_from);
      if (std::string why = pretrained_mismatch(m, *src); !why.empty())
        throw std::runtime_error("model.init_from: " + why);
    }
    // A tensor's initial value: from model.init_from (but LoRA's adapters, from their init),
    // else the seed's init.
    auto initial = [&](const ParamInfo& p, float* dst) {
      if (src && !is_lora_adapter(p.name)) load_pretrained_param(p, shape, *src, dst);
      else init_param(p, shape, r_.train.seed, dst);
    };
    model_->set_frozen(initial);
    double load_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    // LoRA: the frozen base, as its checkpoints will record it.
    if (src && shape.lora.on()) {
      lora_base_path_ = std::filesystem::absolute(src->path()).lexically_normal().string();
      lora_base_fingerprint_ = src->fingerprint();
    }
    allocating = "the optimizer (gradient reduction buffers and state)";
    const auto& o = r_.optim;
    DistOptimConfig cfg;
    cfg.zero = r_.parallel.zero;
    // bucket_mb auto (0): the numeric default until the decision after the session's second step.
    cfg.bucket_elems = parallel::bucket_mb_to_elems(r_.parallel.bucket_mb > 0 ? r_.parallel.bucket_mb : kAutoStartBucketMb);
    cfg.adamw = AdamWHyper{o.beta1, o.beta2, o.eps, o.weight_decay};
    cfg.grad_clip = o.grad_clip;
    cfg.reduce_dtype = r_.parallel.grad_reduce_dtype == "bf16" ? DType::bf16 : DType::f32;
    cfg.prefetch = r_.parallel.prefetch;
    cfg.offload = r_.optim.offload == "cpu";
    optim_ = std::make_unique<DistributedOptimizer>(
        *backend_,
        ModelBuffers{model_->params(), model_->grads(), &model_->table(), model_->grad_ready_points(),
                     model_->units(), compute_},
        groups_, cfg);
    model_->set_storage(optim_->unit_storage());
    // The trainable parameters, a tensor at a time too, once the optimizer exists (at ZeRO-3 its
    // storage keeps what this rank owns of each): one tensor's host buffer, never a copy of the
    // whole slice.
    allocating = src ? "the pretrained weights (model.init_from)" : "the initial parameters";
    std::vector<float> tensor;
    const auto t1 = std::chrono::steady_clock::now();
    for (const ParamInfo& p : model_->table().params()) {
      tensor.resize(p.numel);
      initial(p, tensor.data());
      model_->set_params(p.offset, p.numel, tensor.data());
    }
    load_s += std::chrono::duration<double>(std::chrono::steady_clock::now() - t1).count();  // not the optimizer's set-up
    if (src && rank_ == 0)
      std::printf("loom: model.init_from: %s (%s) loaded in %.2f s\n", m.init_from.c_str(), src->format().c_str(), load_s);
  } catch (const std::bad_alloc& e) {
    // A host allocation's what() is only "std::bad_alloc"; the CUDA backend's says how much was
    // asked for, where, and what the GPU had (kernels/cuda/cuda_check.cuh: DeviceOutOfMemory).
    const std::string cause = e.what() == std::string("std::bad_alloc") ? "" : e.what();
    error = allocation_failure_message(r_, allocating, rank_, cause, backend_->name() == "cuda");
  } catch (const std::exception& e) {
    error = e.what();
  }
  if (error = parallel::agree_on_error(error, groups_.world()); !error.empty()) throw std::runtime_error(error);
}

}  // namespace loom
