#include "engine/train/trainer.hpp"

#include <chrono>
#include <cstdlib>
#include <cstdio>
#include <stdexcept>
#include <vector>

#include "kernels/backend_factory.hpp"
#include "kernels/op_timer.hpp"

namespace loom {
namespace {
constexpr int kByteVocab = 256;
}

void Trainer::check_supported() const {
  // What this build does not do yet is refused up front, by name, rather than run wrongly.
  if (r_.parallel.tp != 1 || r_.parallel.pp != 1 || r_.parallel.dp != 1)
    throw std::runtime_error("parallel: tp=" + std::to_string(r_.parallel.tp) + " pp=" + std::to_string(r_.parallel.pp) +
                             " dp=" + std::to_string(r_.parallel.dp) +
                             ": this build trains on one rank only (tp=pp=dp=1); run without mpirun -np >1");
  const std::string& fmt = r_.data.format;
  if (fmt != "auto" && fmt != "text")
    throw std::runtime_error("data.format=" + fmt + ": not readable by this build (supported: auto, text)");
  if (!r_.checkpoint.dir.empty())
    throw std::runtime_error("checkpoint.dir=" + r_.checkpoint.dir +
                             ": checkpoints are not implemented in this build yet; set checkpoint.dir to \"\"");
  if (r_.model.vocab_size < kByteVocab)
    throw std::runtime_error("model.vocab_size=" + std::to_string(r_.model.vocab_size) +
                             " is smaller than the byte-level vocabulary (256) of data.format=text");
}

Trainer::Trainer(const Recipe& recipe, int rank, int world) : r_(recipe), rank_(rank), world_(world) {
  check_supported();
  backend_ = make_backend(r_.train.backend);
  if (const char* prof = std::getenv("LOOM_PROFILE_OPS"); prof && std::string(prof) == "1") {
    auto timer = std::make_unique<OpTimer>(std::move(backend_));
    op_timer_ = timer.get();
    backend_ = std::move(timer);
  }
  train_data_ = std::make_unique<ByteCorpus>(r_.data.train, "data.train", r_.model.seq_len);
  // Validation loss arrives with the data pipeline; a bad path is still reported now, not later.
  if (!r_.data.val.empty()) ByteCorpus(r_.data.val, "data.val", r_.model.seq_len);
  const auto& m = r_.model;
  GptShape shape = GptShape::make(m.n_layer, m.n_head, m.d_model, m.vocab_size, m.seq_len);
  model_ = std::make_unique<Gpt>(*backend_, shape, r_.train.micro_batch);
  std::vector<float> init(model_->num_params());
  init_params(model_->table(), shape, r_.train.seed, init.data());
  model_->set_params(init.data());
  const auto& o = r_.optim;
  optim_ = std::make_unique<AdamW>(*backend_, model_->table(), AdamWHyper{o.beta1, o.beta2, o.eps, o.weight_decay});
  schedule_ = LrSchedule{o.lr, o.min_lr, o.warmup_steps, r_.train.steps};
  if (rank_ == 0) metrics_ = std::make_unique<MetricsLog>(r_.log.dir);
  peak_flops_ = backend_->peak_flops();
}

Trainer::~Trainer() = default;

void Trainer::log_step(int64_t step, double loss, double lr, double grad_norm, double step_s) {
  const double tokens = double(r_.global_batch_resolved()) * r_.model.seq_len;
  const double tok_s = tokens / step_s;
  const double mfu = model_->shape().flops_per_token() * tok_s / (peak_flops_ * world_);
  metrics_->write({{"step", double(step)},
                   {"loss", loss},
                   {"lr", lr},
                   {"grad_norm", grad_norm},
                   {"tokens_per_s", tok_s},
                   {"mfu", mfu},
                   {"step_ms", step_s * 1e3}});
  std::printf("step %6lld/%lld | loss %.4f | lr %.3e | grad norm %.3f | %.0f tok/s | MFU %.1f%% | %.0f ms\n",
              (long long)step + 1, (long long)r_.train.steps, loss, lr, grad_norm, tok_s, 100 * mfu, step_s * 1e3);
  std::fflush(stdout);
}

TrainSummary Trainer::run() {
  const int B = r_.train.micro_batch, T = r_.model.seq_len;
  const int accum = r_.grad_accum();
  const float dloss = 1.0f / float(size_t(B) * T * accum);  // mean over the global batch
  std::vector<int32_t> tokens(size_t(B) * T), targets(size_t(B) * T);
  Gpt& model = *model_;
  if (rank_ == 0) {
    std::printf("loom: %d layers, %d heads, d_model %d, vocab %d (padded %d), seq %d | %.2fM params | "
                "global batch %d = micro %d x accum %d x dp %d | backend %s, peak %.1f GFLOP/s\n",
                r_.model.n_layer, r_.model.n_head, r_.model.d_model, r_.model.vocab_size, model.shape().vocab_pad, T,
                model.num_params() / 1e6, r_.global_batch_resolved(), B, accum, r_.parallel.dp,
                backend_->name().c_str(), peak_flops_ / 1e9);
    std::fflush(stdout);
  }
  TrainSummary summary;
  double timed_s = 0;
  for (int64_t step = 0; step < r_.train.steps; ++step) {
    auto t0 = std::chrono::steady_clock::now();
    model.zero_grads();
    double loss = 0;
    for (int micro = 0; micro < accum; ++micro) {
      train_data_->sample(r_.train.seed, step, micro * B, B, tokens.data(), targets.data());
      loss += model.forward(tokens.data(), targets.data(), dloss);
      model.backward();
    }
    loss /= accum;
    const double norm = clip_grad_norm(*backend_, model.grads(), model.num_params(), r_.optim.grad_clip);
    const double lr = schedule_.at(step);
    optim_->step(model.params(), model.grads(), lr, step + 1);
    backend_->synchronize();
    const double dt = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (step > 0) timed_s += dt;
    summary.final_loss = loss;
    summary.steps = step + 1;
    if (rank_ == 0 && (step % r_.log.every == 0 || step + 1 == r_.train.steps)) log_step(step, loss, lr, norm, dt);
  }
  if (op_timer_ && rank_ == 0) std::printf("time per op over the run (LOOM_PROFILE_OPS=1):\n%s", op_timer_->report().c_str());
  if (summary.steps > 1)
    summary.tokens_per_s = double(summary.steps - 1) * r_.global_batch_resolved() * T / timed_s;
  return summary;
}

}  // namespace loom
