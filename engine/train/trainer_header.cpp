// The Trainer's start-of-run summary on rank 0: the model and layout, the batch policy, LoRA's
// memory split, the precision, and what a stop signal to mpirun can do.
#include <cstdio>

#include "engine/train/trainer.hpp"

#include "engine/train/choice_scoring.hpp"
#include "parallel/launcher_env.hpp"

namespace loom {

void Trainer::print_header() const {
  if (rank_ != 0) return;
  const auto& m = r_.model;
  std::printf("loom: %d layers, %d heads, d_model %d, vocab %d (padded %d), seq %d | %.2fM params on rank 0 | "
              "global batch %d = micro %d x accum %d x dp %d | %llu samples per epoch | backend %s, peak %.1f "
              "GFLOP/s (%s) | zero %d: optimizer state %.2f MB per rank, %zu gradient buckets\n",
              m.n_layer, m.n_head, m.d_model, m.vocab_size, model_->shape().vocab_pad, m.seq_len,
              model_->num_params() / 1e6, r_.global_batch_resolved(), r_.train.micro_batch, layout_.micro_steps,
              r_.parallel.dp, (unsigned long long)train_data_->samples_per_epoch(), backend_->name().c_str(),
              peak_.flops / 1e9, peak_.source.c_str(), optim_->zero_stage(), optim_->state_bytes() / 1e6, optim_->bucket_count());
  if (const auto& parts = train_data_->index().parts(); !parts.empty()) {
    // Each part's share and how often the run goes through it (a small part repeats sooner).
    const double run_samples = double(r_.train.steps) * double(r_.global_batch_resolved());
    std::string line;
    for (size_t i = 0; i < parts.size(); ++i) {
      char b[512];
      std::snprintf(b, sizeof b, "%s%g%% %s (%llu samples, %.3g passes in train.steps)", i ? ", " : "",
                    parts[i].per_block * 100.0 / kBlendBlock, train_data_->data().blend[i].source.c_str(),
                    (unsigned long long)parts[i].size, run_samples * parts[i].per_block / kBlendBlock / double(parts[i].size));
      line += b;
    }
    std::printf("loom: data.train blend of %zu: %s\n", parts.size(), line.c_str());
  }
  if (batch_.adaptive()) {
    const GoodputBounds& b = batch_.bounds();
    std::printf("loom: batch policy goodput: the global batch is chosen in [%lld, %lld] (multiples of %lld) every %lld "
                "steps, now %lld; learning rate x %s rule against %lld; budget %lld sequences (train.steps %lld x "
                "%lld); step time %s\n",
                (long long)b.min, (long long)b.max, (long long)b.unit, (long long)r_.train.batch_every,
                (long long)batch_.batch(), r_.train.batch_lr_rule.c_str(), (long long)b.reference,
                (long long)(r_.train.steps * b.reference), (long long)r_.train.steps, (long long)b.reference,
                goodput_timing_.valid() ? "fixed by LOOM_GOODPUT_TIMING" : "measured");
  }
  if (model_->shape().lora.on()) {
    // The memory report LoRA is for: what trains (master, gradients, optimizer state) against the
    // frozen base (weights only).
    const LoraSpec& l = model_->shape().lora;
    std::printf("loom: LoRA rank %d, alpha %g (scale %g), targets %s: %.3fM trainable parameters on rank 0 "
                "(master + gradients %.2f MB, optimizer state %.2f MB); frozen base %.2fM parameters, %.2f MB (%s, "
                "no gradients, no optimizer state)\n",
                l.rank, l.alpha, l.scale(), r_.lora.targets.c_str(), model_->num_params() / 1e6,
                (model_->param_bytes() + model_->grad_bytes()) / 1e6, optim_->state_bytes() / 1e6,
                model_->frozen_table().total() / 1e6, model_->frozen_bytes() / 1e6,
                r_.lora.quantize == "none" ? dtype_name(compute_) : r_.lora.quantize.c_str());
  }
  if (compute_ != DType::f32) {
    char scale[64] = "";
    if (scaler_->enabled()) std::snprintf(scale, sizeof scale, "; dynamic loss scale from %g", scaler_->scale());
    std::printf("loom: precision %s: fp32 master weights, gradients and optimizer state; %s weights copy and "
                "activations%s; gradients reduced in %s\n",
                dtype_name(compute_), dtype_name(compute_), scale, r_.parallel.grad_reduce_dtype.c_str());
  }
  if (const std::string note = backend_->precision_note(compute_); !note.empty()) std::printf("loom: note: %s\n", note.c_str());
  if (!cpu_threads_note_.empty()) std::printf("%s\n", cpu_threads_note_.c_str());
  if (!val_repeat_note_.empty()) std::printf("%s\n", val_repeat_note_.c_str());
  if (!val_split_note_.empty()) std::printf("%s\n", val_split_note_.c_str());
  if (!val_same_note_.empty()) std::printf("%s\n", val_same_note_.c_str());
  if (!choice_items_.empty()) {
    size_t endings = 0, cut = 0;
    for (const ChoiceItem& it : choice_items_) {
      endings += it.endings.size();
      for (size_t e = 0; e < it.endings.size(); ++e)
        if (context_dropped(it, e, int(r_.model.seq_len)) > 0) {
          ++cut;
          break;
        }
    }
    std::printf("loom: log.choices: %zu multiple-choice items from %s (%zu forward rows of %d tokens), scored every "
                "%lld steps and at the end as choice_acc and choice_acc_norm%s\n",
                choice_items_.size(), r_.log.choices.c_str(), endings, r_.model.seq_len, (long long)r_.log.eval_every,
                cut ? (" (" + std::to_string(cut) + " of them lose context tokens on the left to fit)").c_str() : "");
  }
  std::printf("loom: learning rate: %s\n", describe(schedule_).c_str());
  // A schedule whose warmup outlasts the run never reaches optim.lr and never decays (Megatron
  // refuses it; a short test run of a longer recipe is a fair reason to do it, so a note). Under
  // goodput train.steps counts reference steps, as the schedule does.
  const long long steps = r_.train.steps;
  if (r_.optim.warmup_steps >= steps)
    std::printf("loom: note: optim.warmup_steps=%lld is not below train.steps=%lld: the learning rate is still "
                "warming up towards optim.lr=%g when the run ends, and never decays\n",
                (long long)r_.optim.warmup_steps, steps, r_.optim.lr);
  // (Not for inverse_sqrt, which has no end it decays towards: its drop to min_lr at decay_steps
  // is Megatron's cut-off, not a destination.)
  else if (schedule_.decay != LrDecay::Constant && schedule_.decay != LrDecay::InverseSqrt &&
           schedule_.decay_steps > steps)
    std::printf("loom: note: optim.decay_steps=%lld is past train.steps=%lld: the schedule ends at a learning rate "
                "of %g, before the decay reaches optim.min_lr=%g (to go on later: checkpoint.resume with a larger "
                "train.steps)\n",
                (long long)schedule_.decay_steps, steps, schedule_.at(steps - 1), r_.optim.min_lr);
  if (schedule_.decay == LrDecay::Wsd && schedule_.decay_steps > r_.optim.warmup_steps &&
      schedule_.wsd_decay_steps > schedule_.decay_steps - r_.optim.warmup_steps)
    std::printf("loom: note: optim.wsd_decay_steps=%lld is longer than the %lld steps from the warmup to "
                "optim.decay_steps (auto: train.steps): the whole decay phase is the cooldown, with no stable part\n",
                (long long)schedule_.wsd_decay_steps, (long long)(schedule_.decay_steps - r_.optim.warmup_steps));
  // mpirun gives the ranks only odls_base_sigkill_timeout (Open MPI's default) after it receives
  // SIGTERM or Ctrl-C: too little to finish a step and save. Said once, with what works.
  if (const double grace = parallel::mpirun_kill_grace_s(); !r_.checkpoint.dir.empty() && grace >= 0 && grace < 60)
    std::printf("loom: note: SIGTERM or Ctrl-C to mpirun gives the ranks %.0f s before it kills them "
                "(odls_base_sigkill_timeout), too little to finish a step and save; to stop with a checkpoint, send "
                "SIGUSR1 to mpirun (kill -USR1 PID): the job saves at the end of the step and exits 75 "
                "(docs/runs.md)\n",
                grace);
  std::fflush(stdout);
}

}  // namespace loom
