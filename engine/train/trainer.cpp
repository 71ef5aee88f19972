#include "engine/train/trainer.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <functional>
#include <cstdlib>
#include <stdexcept>
#include <vector>

#include <unistd.h>

#include <filesystem>
#include <thread>

#include "engine/config/recipe_io.hpp"
#include "engine/util/crc32c.hpp"
#include "engine/train/memory_check.hpp"
#include "engine/train/stop_request.hpp"
#include "engine/util/host_memory.hpp"
#include "engine/util/job_error.hpp"
#include "parallel/mpi_world.hpp"
#include "kernels/backend_factory.hpp"
#include "parallel/pipeline_schedule.hpp"
#include "parallel/watchdog.hpp"

namespace loom {

int exit_status(const TrainSummary& s) {
  if (s.stopped_early.empty()) return 0;
  return s.resumable ? kExitResumable : kExitStoppedNothingSaved;
}

Trainer::Trainer(const Recipe& recipe, parallel::ProcessGroups& groups, const std::string& command)
    : r_(recipe),
      groups_(groups),
      rank_(groups.world_rank()),
      world_(groups.layout().world()),
      trace_(groups.world_rank()),
      faults_(FaultInjection::from_env()),
      started_(std::chrono::steady_clock::now()) {
  // Data first: a bad path or shard is reported before any model memory is allocated.
  const auto& m = r_.model;
  layout_ = LoaderLayout{m.seq_len, r_.train.micro_batch, r_.grad_accum(), groups.coord().dp, r_.parallel.dp,
                         r_.train.seed};
  TokenDataset train = open_dataset(r_.data.train, r_.data.format, "data.train", "train");
  validate_dataset(train, m.vocab_size, m.seq_len, "data.train");
  if (!r_.data.val.empty()) {
    TokenDataset val = open_dataset(r_.data.val, r_.data.format, "data.val", "val");
    validate_dataset(val, m.vocab_size, m.seq_len, "data.val");
    if (r_.log.eval_every > 0) val_batches_ = validation_batches(val, layout_, r_.log.eval_batches);
  }

  if (r_.train.precision != "fp32")
    throw std::runtime_error("train.precision=" + r_.train.precision +
                             ": only fp32 is implemented so far (bf16/fp16 with fp32 master weights come with the GPU "
                             "training work); use train.precision=fp32");
  backend_ = make_backend(r_.train.backend);
  if (const char* prof = std::getenv("LOOM_PROFILE_OPS"); prof && std::string(prof) == "1") {
    auto timer = std::make_unique<OpTimer>(std::move(backend_));
    op_timer_ = timer.get();
    backend_ = std::move(timer);
  }
  // The vocabulary is padded to a multiple of 128 * tp: every rank gets an equal, aligned slice.
  const int tp = r_.parallel.tp;
  GptShape shape = GptShape::make(m.n_layer, m.n_head, m.d_model, m.vocab_size, m.seq_len, 128 * tp);
  // Pipeline stage: contiguous blocks; the first stage embeds, the last computes the loss.
  const int pp = r_.parallel.pp, stage = groups.coord().pp;
  const std::vector<int> per_stage = r_.stage_layers();
  StageSpec spec{0, per_stage[size_t(stage)], stage == 0, stage == pp - 1};
  for (int s = 0; s < stage; ++s) spec.first_layer += per_stage[size_t(s)];
  const int slots = parallel::pipeline_in_flight(stage, pp, r_.grad_accum());
  // Device buffers (CUDA) travel over NCCL communicators ordered after the backend's stream;
  // host buffers (CPU) over MPI. Host scalars (losses, norms) always over MPI.
  if (backend_->stream()) groups.use_nccl(cuda_device_for_this_rank(), backend_->stream());
  // Collective: every rank's host name (for run.json, and to count the ranks sharing this node).
  const std::vector<std::string> hosts = gather_hostnames();
  // Out of memory is said before anything large is allocated, where the plan can tell. Either
  // check may fail on some ranks only (nodes differ): the ranks agree before going on to the
  // collective calls below, so that none is left waiting in one.
  const auto& o = r_.optim;
  const char* allocating = "the model (parameters, gradients, activations)";
  std::string memory_error;
  // The initial parameters' host copy lives to the end of construction, as `loom plan` models it
  // (plan.cpp: host staging; freeing it earlier shifts the peak differently per layout).
  std::vector<float> init;
  try {
    if (backend_->name() == "cpu")
      check_host_memory_fits(r_, int(std::count(hosts.begin(), hosts.end(), hosts[size_t(rank_)])));
    model_ = std::make_unique<Gpt>(*backend_, shape, r_.train.micro_batch,
                                   TensorParallel{groups.coord().tp, tp, &groups.device_tp()}, spec, slots,
                                   recompute_from_name(r_.train.recompute));
    init.resize(model_->num_params());
    init_params(model_->table(), shape, r_.train.seed, init.data());
    model_->set_params(init.data());
    allocating = "the gradient reduction buffers";
    const size_t bucket = std::max<size_t>(1, size_t(r_.parallel.bucket_mb * (1 << 20) / sizeof(float)));
    grad_sync_ = std::make_unique<parallel::GradSync>(groups.device_dp(), model_->grads(), model_->num_params(),
                                                      bucket, r_.parallel.zero == 1,
                                                      [this](size_t n) { return backend_->alloc(n); },
                                                      model_->grad_ready_points());
    std::vector<FlatRange> owned;
    for (const auto& rg : grad_sync_->owned()) owned.push_back({rg.begin, rg.end});
    allocating = "the optimizer state";
    optim_ = std::make_unique<AdamW>(*backend_, model_->table(), AdamWHyper{o.beta1, o.beta2, o.eps, o.weight_decay},
                                     owned);
  } catch (const std::bad_alloc&) {
    memory_error = allocation_failure_message(r_, allocating, rank_);
  } catch (const std::exception& e) {
    memory_error = e.what();
  }
  if (memory_error = parallel::agree_on_error(memory_error, groups.world().comm()); !memory_error.empty())
    throw std::runtime_error(memory_error);
  schedule_ = LrSchedule{o.lr, o.min_lr, o.warmup_steps, r_.train.steps};
  // Resume (checkpoint.resume), then start the loader where the checkpoint's left off.
  checkpointer_ = std::make_unique<Checkpointer>(r_, groups, *model_, *optim_, *grad_sync_);
  const ResumePoint at = checkpointer_->resume();
  start_step_ = at.steps_done;
  resumed_from_ = at.path;
  first_bad_step_ = at.health.first_bad_step;
  data_now_ = DataNow{uint64_t(r_.train.seed), int64_t(r_.global_batch_resolved()),
                      int64_t(SampleIndex(train.shards, m.seq_len).size())};
  LoaderState start;
  if (!at.path.empty()) {
    std::vector<std::string> notes;
    start = resume_data_position(at.data, data_now_, r_.checkpoint.allow_changes, &notes);
    if (rank_ == 0)
      for (const std::string& n : notes) std::printf("loom: resuming: %s\n", n.c_str());
  }
  train_data_ = std::make_unique<DataLoader>(std::move(train), layout_, 2, start);
  // What rank 0 alone writes may fail on rank 0 alone (the CLI makes every rank agree on that
  // error).
  if (rank_ == 0) metrics_ = std::make_unique<MetricsLog>(r_.log.dir, start_step_);
  if (rank_ == 0) start_run_record(command, at.path, hosts);
  if (rank_ == 0 && r_.log.tensorboard) tensorboard_ = std::make_unique<TensorBoardWriter>(r_.log.dir, start_step_);
  peak_flops_ = backend_->peak_flops();
  if (backend_->name() == "cuda") {
    // The GPU this rank drives: its index among the ranks of its node (Open MPI or Slurm).
    const char* local = std::getenv("OMPI_COMM_WORLD_LOCAL_RANK");
    if (!local) local = std::getenv("SLURM_LOCALID");
    nvml_ = std::make_unique<NvmlProbe>(local ? std::atoi(local) : 0);
    if (!nvml_->available() && rank_ == 0)
      std::fprintf(stderr, "loom: no GPU health metrics: %s\n", nvml_->why_not().c_str());
  }
}

Trainer::~Trainer() { parallel::Watchdog::stop(); }

std::vector<std::string> Trainer::gather_hostnames() {
  constexpr int kHost = 64;
  char host[kHost] = {};
  gethostname(host, kHost - 1);
  std::vector<char> all(size_t(world_) * kHost);
  MPI_Allgather(host, kHost, MPI_CHAR, all.data(), kHost, MPI_CHAR, groups_.world().comm());
  std::vector<std::string> out;
  for (int i = 0; i < world_; ++i) out.emplace_back(all.data() + size_t(i) * kHost);
  return out;
}

void Trainer::start_run_record(const std::string& command, const std::string& resumed_from,
                               const std::vector<std::string>& hosts) {
  SessionInfo info;
  info.command = command;
  info.recipe_yaml = recipe_to_yaml(r_);
  info.backend = backend_->name();
  char mpi[MPI_MAX_LIBRARY_VERSION_STRING] = {};
  int len = 0;
  MPI_Get_library_version(mpi, &len);
  info.mpi_version = std::string(mpi, size_t(len));
  if (auto nl = info.mpi_version.find_first_of("\r\n,"); nl != std::string::npos) info.mpi_version.resize(nl);
  for (int i = 0; i < world_; ++i) {
    const auto c = groups_.layout().coord(i);
    info.ranks.push_back({i, c.tp, c.dp, c.pp, hosts[size_t(i)]});
  }
  info.start_step = start_step_;
  info.resumed_from = resumed_from;
  run_record_ = std::make_unique<RunRecord>(r_.log.dir, info);
}

void Trainer::note_failure(const std::string& error) {
  if (run_record_) run_record_->finish(-1, 1, error);
}

RankHealth Trainer::gather_health(double step_s) {
  // Step time, host memory and (CUDA) GPU health of every rank, gathered to all (collective over
  // the world): the slowest rank and its lag behind the median are the stragglers to look at.
  constexpr size_t kF = 8;
  const HostMemory mem = host_memory();
  std::vector<float> all(size_t(world_) * kF, 0.0f);
  float* mine = all.data() + size_t(rank_) * kF;
  mine[0] = float(step_s * 1e3);
  mine[1] = float(mem.rss_mb);
  mine[2] = float(mem.peak_mb);
  if (nvml_ && nvml_->available()) {
    const GpuHealth g = nvml_->read();
    mine[3] = 1;
    mine[4] = float(g.util_pct);
    mine[5] = float(g.mem_used_mb);
    mine[6] = float(g.power_w);
    mine[7] = float(g.temp_c);
  }
  groups_.world().all_gather(all.data(), std::vector<size_t>(size_t(world_), kF));
  RankHealth h;
  h.gpu = true;
  h.gpu_util_min_pct = 100;
  std::vector<double> times;
  for (int i = 0; i < world_; ++i) {
    const float* m = all.data() + size_t(i) * kF;
    times.push_back(m[0]);
    if (m[0] > h.slowest_ms) {
      h.slowest_ms = m[0];
      h.slowest_rank = i;
    }
    h.rss_mb = std::max(h.rss_mb, double(m[1]));
    h.peak_rss_mb = std::max(h.peak_rss_mb, double(m[2]));
    h.gpu = h.gpu && m[3] == 1;
    h.gpu_util_min_pct = std::min(h.gpu_util_min_pct, double(m[4]));
    h.gpu_mem_max_mb = std::max(h.gpu_mem_max_mb, double(m[5]));
    h.gpu_power_max_w = std::max(h.gpu_power_max_w, double(m[6]));
    h.gpu_temp_max_c = std::max(h.gpu_temp_max_c, double(m[7]));
  }
  std::sort(times.begin(), times.end());
  h.median_ms = times[times.size() / 2];
  h.step_ms = step_s * 1e3;
  return h;
}

double Trainer::global_grad_norm() {
  // Each element of the global gradient counted once: under ZeRO-1 every dp rank sums only the
  // shard it owns, and a tensor replicated over tp (LayerNorms, wpe, row-parallel biases) is
  // counted by tp rank 0 only. Partial sums are added in rank order: every rank gets the same bits.
  parallel::GradSync& sync = *grad_sync_;
  const bool tp_lead = groups_.coord().tp == 0;
  const float* packed = sync.owned_grads();
  double local = 0;
  size_t k = 0;
  for (const auto& rg : sync.owned()) {
    for (const ParamInfo& p : model_->table().params()) {
      const size_t lo = std::max(rg.begin, p.offset), hi = std::min(rg.end, p.offset + p.numel);
      // The tied wte of a pipeline's last stage is a copy of the first stage's: counted there.
      const bool tied_copy = p.name == "wte" && !model_->stage().first;
      if (lo < hi && !tied_copy && (tp_lead || p.split != TpSplit::Replicated))
        local += backend_->sum_squares(packed + k + (lo - rg.begin), hi - lo);
    }
    k += rg.size();
  }
  if (sync.zero1()) local = groups_.dp().sum_ordered(local);
  local = groups_.pp().sum_ordered(local);
  return std::sqrt(groups_.tp().sum_ordered(local));
}

void Trainer::check_replicas() {
  // Tensors replicated over tp get identical gradients on every tp rank by construction (they are
  // computed from the same all-reduced activations); verify that the parameters really agree.
  if (r_.parallel.tp == 1) return;
  std::vector<float> host(model_->num_params());
  model_->get_params(host.data());
  uint32_t crc = 0;
  for (const ParamInfo& p : model_->table().params())
    if (p.split == TpSplit::Replicated) crc = crc32c(host.data() + p.offset, p.numel * sizeof(float), crc);
  const double mine = double(crc);
  const double sum = groups_.tp().sum_ordered(mine);
  if (sum != mine * r_.parallel.tp)
    throw std::runtime_error("replicated parameters (LayerNorms, wpe, row-parallel biases) differ across the "
                             "tensor-parallel group of rank " + std::to_string(rank_));
  if (rank_ == 0) std::printf("loom: replicated parameters identical on every tensor-parallel rank\n");
}

void Trainer::report_memory() {
  // Per rank: pipeline stage, activation slots (1F1B keeps at most pp - stage micro-batches in
  // flight), activation bytes, optimizer state bytes and peak host RSS, gathered to rank 0.
  const int n = world_;
  std::vector<float> all(size_t(n) * 5, 0.0f);
  float* mine = all.data() + size_t(rank_) * 5;
  mine[0] = float(groups_.coord().pp);
  mine[1] = float(parallel::pipeline_in_flight(groups_.coord().pp, r_.parallel.pp, layout_.micro_steps));
  mine[2] = float(model_->activation_bytes() / 1e6);
  mine[3] = float(optim_->state_bytes() / 1e6);
  mine[4] = float(host_memory().peak_mb);
  groups_.world().all_gather(all.data(), std::vector<size_t>(size_t(n), 5));
  if (rank_ != 0) return;
  std::printf("loom: memory per rank (activations: micro-batches in flight x one micro-batch's activations)\n");
  for (int i = 0; i < n; ++i) {
    const float* m = all.data() + size_t(i) * 5;
    std::printf("loom:   rank %d stage %d: %d in flight, activations %.2f MB, optimizer state %.2f MB, peak RSS "
                "%.1f MB\n",
                i, int(m[0]), int(m[1]), m[2], m[3], m[4]);
  }
}

void Trainer::check_tied_embeddings() {
  parallel::MpiCommunicator* emb = groups_.embedding();
  if (!emb) return;
  std::vector<float> host(model_->num_params());
  model_->get_params(host.data());
  const ParamInfo& wte = model_->table().find("wte");
  const double mine = double(crc32c(host.data() + wte.offset, wte.numel * sizeof(float)));
  if (emb->sum_ordered(mine) != 2 * mine)
    throw std::runtime_error("the tied embedding copies of the first and last pipeline stages differ (rank " +
                             std::to_string(rank_) + ")");
  if (groups_.coord().pp == 0 && groups_.coord().tp == 0 && groups_.coord().dp == 0)
    std::printf("loom: tied embedding identical on the first and last pipeline stages\n");
}

double Trainer::dp_mean(double local) { return groups_.dp().sum_ordered(local) / r_.parallel.dp; }

double Trainer::evaluate() {
  // Forward only, micro-batch by micro-batch through the pipeline (activations flow down the
  // stages in order; nothing flows back). The last stage holds the losses.
  const int B = r_.train.micro_batch, T = r_.model.seq_len;
  const size_t elems = size_t(B) * T * r_.model.d_model;
  const StageSpec& st = model_->stage();
  parallel::Communicator& pp = groups_.device_pp();  // activations: device buffers on CUDA
  double sum = 0;
  int n = 0;
  for (const StepBatch& b : val_batches_)
    for (int micro = 0; micro < layout_.micro_steps; ++micro, ++n) {
      const size_t off = size_t(micro) * B * T;
      if (!st.first) pp.recv(model_->input(0), elems, pp.rank() - 1, 21);
      sum += model_->forward(0, b.tokens.data() + off, b.targets.data() + off, 0.0f);
      if (!st.last) pp.send(model_->output(0), elems, pp.rank() + 1, 21);
    }
  return dp_mean(groups_.pp().sum_ordered(sum) / n);  // a host scalar: MPI
}

void Trainer::log_step(int64_t step, double loss, double val_loss, double lr, double grad_norm, double step_s,
                       double wait_s, double comm_s, const RankHealth& h, bool skipped) {
  const double tokens = double(r_.global_batch_resolved()) * r_.model.seq_len;
  const double tok_s = tokens / step_s;
  const double mfu = model_->shape().flops_per_token() * tok_s / (peak_flops_ * world_);
  std::vector<std::pair<std::string, double>> fields = {
      {"step", double(step)}, {"loss", loss}, {"lr", lr}, {"grad_norm", grad_norm}};
  if (val_loss >= 0) fields.emplace_back("val_loss", val_loss);
  fields.insert(fields.end(), {{"tokens_per_s", tok_s},
                               {"mfu", mfu},
                               {"step_ms", step_s * 1e3},
                               {"data_wait_ms", wait_s * 1e3},
                               {"comm_wait_ms", comm_s * 1e3},
                               {"slowest_rank", double(h.slowest_rank)},
                               {"slowest_step_ms", h.slowest_ms},
                               {"straggler_lag_ms", h.slowest_ms - h.median_ms},
                               {"rss_mb", h.rss_mb},
                               {"peak_rss_mb", h.peak_rss_mb}});
  if (h.gpu)
    fields.insert(fields.end(), {{"gpu_util_min_pct", h.gpu_util_min_pct},
                                 {"gpu_mem_max_mb", h.gpu_mem_max_mb},
                                 {"gpu_power_max_w", h.gpu_power_max_w},
                                 {"gpu_temp_max_c", h.gpu_temp_max_c}});
  if (skipped) fields.emplace_back("skipped", 1);
  metrics_->write(fields);
  if (tensorboard_) {
    std::vector<std::pair<std::string, double>> tb;
    for (const auto& [k, v] : fields)
      if (k != "step" && k != "slowest_rank") tb.emplace_back((k == "loss" || k == "val_loss" ? "loss/" : "perf/") + k, v);
    tensorboard_->scalars(step + 1, tb);  // TensorBoard's step is the number of steps done
  }
  // ETA from this session's mean step time so far.
  const double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - started_).count();
  const double per_step = elapsed / double(step + 1 - start_step_);
  const double eta_s = per_step * double(r_.train.steps - step - 1);
  char val[32] = "", eta[32];
  if (val_loss >= 0) std::snprintf(val, sizeof val, " | val %.4f", val_loss);
  if (eta_s >= 3600)
    std::snprintf(eta, sizeof eta, "%dh%02dm", int(eta_s / 3600), int(eta_s / 60) % 60);
  else
    std::snprintf(eta, sizeof eta, "%dm%02ds", int(eta_s / 60), int(eta_s) % 60);
  std::printf("step %6lld/%lld | loss %.4f%s | lr %.3e | grad norm %.3f | %.0f tok/s | MFU %.1f%% | %.0f ms | "
              "data wait %.1f ms | comm wait %.1f ms | mem %.0f MB | slowest rank %d +%.0f ms | ETA %s%s\n",
              (long long)step + 1, (long long)r_.train.steps, loss, val, lr, grad_norm, tok_s, 100 * mfu, step_s * 1e3,
              wait_s * 1e3, comm_s * 1e3, h.rss_mb, h.slowest_rank, h.slowest_ms - h.median_ms, eta,
              skipped ? " | SKIPPED (non-finite)" : "");
  std::fflush(stdout);
}

TrainSummary Trainer::run() {
  const int B = r_.train.micro_batch, T = r_.model.seq_len;
  const int accum = layout_.micro_steps;
  // Each rank's backward adds 1/(global tokens) per token, so the sum over dp is the gradient of
  // the mean loss over the global batch.
  const float dloss = 1.0f / float(size_t(r_.global_batch_resolved()) * T);
  Gpt& model = *model_;
  if (rank_ == 0) {
    std::printf("loom: %d layers, %d heads, d_model %d, vocab %d (padded %d), seq %d | %.2fM params on rank 0 | "
                "global batch %d = micro %d x accum %d x dp %d | %llu samples per epoch | backend %s, peak %.1f "
                "GFLOP/s | zero %d: optimizer state %.2f MB per rank, %zu gradient buckets\n",
                r_.model.n_layer, r_.model.n_head, r_.model.d_model, r_.model.vocab_size, model.shape().vocab_pad, T,
                model.num_params() / 1e6, r_.global_batch_resolved(), B, accum, r_.parallel.dp,
                (unsigned long long)train_data_->samples_per_epoch(), backend_->name().c_str(), peak_flops_ / 1e9,
                r_.parallel.zero, optim_->state_bytes() / 1e6, grad_sync_->bucket_count());
    std::fflush(stdout);
  }
  // mpirun kills its ranks odls_base_sigkill_timeout seconds (1 by default) after it receives
  // SIGTERM or Ctrl-C: too little to finish a step and save. Said once, with what works.
  if (const double grace = mpirun_kill_grace_s(); rank_ == 0 && !r_.checkpoint.dir.empty() && grace >= 0 && grace < 60)
    std::printf("loom: note: SIGTERM or Ctrl-C to mpirun gives the ranks %.0f s before it kills them "
                "(odls_base_sigkill_timeout), too little to finish a step and save; to stop with a checkpoint, send "
                "SIGUSR1 to mpirun (kill -USR1 PID): the job saves at the end of the step and exits 75 "
                "(docs/runs.md)\n",
                grace);
  TrainSummary summary;
  summary.start_step = summary.steps = start_step_;
  double timed_s = 0, last_wait = 0;
  int consecutive_bad = 0;
  double max_save_s = 0;  // the longest save so far: the room train.max_minutes leaves for the last one
  parallel::GradSync& sync = *grad_sync_;
  // From here every blocking communication call is watched (parallel.timeout_s).
  parallel::Watchdog::start(r_.parallel.timeout_s, rank_);
  const int64_t trace_from = start_step_ + 1, trace_to = trace_from + r_.log.trace_steps;
  for (int64_t step = start_step_; step < r_.train.steps; ++step) {
    parallel::Watchdog::set_step(step);
    trace_.set_enabled(r_.log.trace && step >= trace_from && step < trace_to);
    auto t0 = std::chrono::steady_clock::now();
    StepBatch batch;
    {
      TraceRecorder::Span span(&trace_, "data", "data");
      batch = train_data_->next();
    }
    model.zero_grads();
    double loss = 0;
    const int slots = parallel::pipeline_in_flight(groups_.coord().pp, r_.parallel.pp, accum);
    // Gradient accumulation communicates nothing until the last micro-batch, whose backward
    // launches each gradient bucket as soon as it is complete. The tied embedding (offset 0) of a
    // pipeline's first and last stages waits for the embedding group's sum below.
    const size_t defer_below = groups_.embedding() ? model.table().find("wte").numel : 0;
    auto hook = [&](size_t o) { sync.grads_ready_from(std::max(o, defer_below)); };
    parallel::StageWork work;
    work.forward = [&](int i) {
      TraceRecorder::Span span(&trace_, "forward", "compute", i);
      const size_t off = size_t(i) * B * T;
      loss += model.forward(i % slots, batch.tokens.data() + off, batch.targets.data() + off, dloss);
    };
    work.backward = [&](int i) {
      TraceRecorder::Span span(&trace_, "backward", "compute", i);
      const bool overlap = i + 1 == accum && r_.parallel.overlap_grad_reduce;
      model.set_grad_ready_hook(overlap ? std::function<void(size_t)>(hook) : nullptr);
      model.backward(i % slots);
    };
    work.input = [&](int i) { return model.input(i % slots); };
    work.output = [&](int i) { return model.output(i % slots); };
    work.output_grad = [&] { return model.output_grad(); };
    work.input_grad = [&] { return model.input_grad(); };
    if (faults_.sleep_rank == rank_ && faults_.sleep_step == step + 1) {
      std::fprintf(stderr, "loom: rank %d: LOOM_FAULT: sleeping %.0f s inside step %lld\n", rank_, faults_.sleep_s,
                   (long long)step + 1);
      std::this_thread::sleep_for(std::chrono::duration<double>(faults_.sleep_s));
    }
    parallel::run_1f1b(groups_.device_pp(), accum, size_t(B) * T * r_.model.d_model, work);
    model.set_grad_ready_hook(nullptr);
    {
      TraceRecorder::Span span(&trace_, "embedding and loss all-reduce", "communication");
      if (parallel::Communicator* emb = groups_.device_embedding()) {
        // Tied embedding: the first stage's (lookup) and last stage's (head) gradients summed, so
        // both copies take the same update and stay identical.
        const ParamInfo& wte = model.table().find("wte");
        emb->all_reduce(model.grads() + wte.offset, wte.numel, parallel::ReduceOp::Sum);
      }
      // The loss lives on the last stage: the sum over the pipeline group gives it to every stage.
      loss = groups_.pp().sum_ordered(loss);
    }
    double comm_s;
    {
      TraceRecorder::Span span(&trace_, "gradient reduction wait", "communication");
      comm_s = sync.finish();
    }
    summary.comm_wait_s += comm_s;
    if (faults_.nan_steps.count(step + 1) && sync.owned_size() > 0) {
      const float nan = std::nanf("");
      backend_->upload(sync.owned_grads(), &nan, 1);
    }
    double norm;
    {
      TraceRecorder::Span span(&trace_, "gradient norm", "communication");
      norm = global_grad_norm();
      loss = dp_mean(loss / accum);
    }
    // A non-finite loss or gradient norm (identical on every rank: both are global) skips the
    // update; the step's batch is consumed, as in Megatron.
    const bool skipped = !std::isfinite(loss) || !std::isfinite(norm);
    // The run's first bad step: non-finite, or a loss above three times that of a model guessing
    // uniformly over the vocabulary (ln V), which a healthy run does not reach after
    // initialisation. Every rank sees the same loss and norm, so all agree on it.
    if (first_bad_step_ < 0 && (skipped || loss > 3 * std::log(double(r_.model.vocab_size)))) {
      first_bad_step_ = step + 1;
      if (rank_ == 0)
        std::fprintf(stderr, "loom: step %lld: %s (loss %g): checkpoints from here on are marked not clean; the last "
                             "clean one is kept whatever checkpoint.keep_last says%s%s\n",
                     (long long)step + 1, skipped ? "the run went non-finite" : "the loss diverged", loss,
                     resumed_from_.empty() ? "" : "; this session resumed from ", resumed_from_.c_str());
    }
    const double lr = schedule_.at(step);
    if (!skipped) {
      consecutive_bad = 0;
      TraceRecorder::Span span(&trace_, "optimizer", "optimizer");
      clip_by_norm(*backend_, sync.owned_grads(), sync.owned_size(), norm, r_.optim.grad_clip);
      optim_->step(model.params(), sync.owned_grads(), lr, step + 1);
      sync.gather_params(model.params());
    } else {
      ++consecutive_bad;
      ++summary.skipped_steps;
      if (rank_ == 0)
        std::fprintf(stderr, "loom: step %lld: non-finite %s (loss %g, gradient norm %g): update skipped (%d in a row; "
                             "train.max_nonfinite_steps = %d)\n",
                     (long long)step + 1, std::isfinite(loss) ? "gradient norm" : "loss", loss, norm, consecutive_bad,
                     r_.train.max_nonfinite_steps);
    }
    backend_->synchronize();
    const double dt = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (step > start_step_) timed_s += dt;
    // The schedule always runs to train.steps; stop_at_step only ends this run early.
    const bool too_many_bad = consecutive_bad >= r_.train.max_nonfinite_steps;
    // Stop early, with a checkpoint, on SIGUSR1/SIGTERM (preemption, a time limit ahead) or when
    // train.max_minutes would not leave room for another step and a save. Every rank must stop
    // at the same step, so the ranks agree on it here (a max over one float).
    float stop_vote = !log_error_.empty() ? 3.0f : stop_signal() ? 2.0f : 0.0f;
    if (!stop_vote && r_.train.max_minutes > 0) {
      const double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - started_).count();
      const double margin = 2 * dt + (max_save_s > 0 ? 1.5 * max_save_s : 10 * dt);
      if (elapsed + margin > r_.train.max_minutes * 60) stop_vote = 1.0f;
    }
    groups_.world().all_reduce(&stop_vote, 1, parallel::ReduceOp::Max);
    const bool stop_now = stop_vote > 0 && step + 1 < r_.train.steps && step + 1 != r_.train.stop_at_step;
    if (stop_vote == 2 && rank_ == 0 && step + 1 < r_.train.steps)
      std::printf("loom: stop requested (%s): saving a checkpoint of step %lld and stopping\n", stop_signal() ?
                  stop_signal_name() : "a signal on another rank", (long long)step + 1);
    const bool log_failed = stop_vote == 3;  // rank 0 could not write the run directory: save, then fail
    if (stop_now && !log_failed)
      summary.stopped_early = stop_vote == 2 ? std::string("a stop signal (") + stop_signal_name() + ")"
                                             : "train.max_minutes = " + std::to_string(r_.train.max_minutes);
    const bool last = step + 1 == r_.train.steps || step + 1 == r_.train.stop_at_step || too_many_bad || stop_now ||
                      log_failed;
    double val_loss = -1;
    if (!val_batches_.empty() && !too_many_bad && ((step + 1) % r_.log.eval_every == 0 || last)) {
      TraceRecorder::Span span(&trace_, "evaluation", "compute");
      val_loss = evaluate();
      summary.final_val_loss = val_loss;
    }
    if (!skipped) summary.final_loss = loss;
    summary.steps = step + 1;
    if (step % r_.log.every == 0 || last || val_loss >= 0 || skipped) {  // the same on every rank
      const RankHealth health = gather_health(dt);
      if (rank_ == 0 && log_error_.empty()) {
        try {
          log_step(step, loss, val_loss, lr, norm, dt, train_data_->wait_seconds() - last_wait, comm_s, health,
                   skipped);
        } catch (const std::exception& e) {
          // A full or failing log.dir: the ranks learn of it at the next step's vote, save a
          // checkpoint (checkpoint.dir may be elsewhere) and stop with this error.
          log_error_ = e.what();
          std::fprintf(stderr, "loom: error: %s; %s\n", log_error_.c_str(),
                       r_.checkpoint.dir.empty() ? "stopping" : "saving a checkpoint and stopping");
        }
      }
      last_wait = train_data_->wait_seconds();
    }
    const int64_t done = step + 1;
    if (!r_.checkpoint.dir.empty() && ((r_.checkpoint.every > 0 && done % r_.checkpoint.every == 0) || last)) {
      TraceRecorder::Span span(&trace_, "checkpoint save", "checkpoint");
      const SavedDataPosition data{train_data_->state(), data_now_.seed, true, data_now_.global_batch,
                                   data_now_.samples_per_epoch};
      const double save_s = checkpointer_->save(done, data, StateHealth{summary.final_loss, first_bad_step_});
      summary.resumable = true;
      summary.checkpoint_stall_s += save_s;
      max_save_s = std::max(max_save_s, save_s);
    }
    if (r_.log.trace && step + 1 == trace_to) write_trace();
    if (too_many_bad) {
      checkpointer_->wait();
      std::string where;
      if (!r_.checkpoint.dir.empty()) {
        where = "; the state after the last update is saved as step " + std::to_string(done) + " (marked not clean)";
        if (rank_ == 0) {  // rank 0 alone reads checkpoint.dir
          const std::string clean = checkpointer_->last_clean_checkpoint(first_bad_step_);
          where += "; the last clean checkpoint is " + (clean.empty() ? std::string("(none)") : clean) +
                   (clean.empty() ? "" : ": resume from it with --set checkpoint.resume=" + clean);
        }
      }
      throw JobError(std::to_string(consecutive_bad) + " steps in a row (to step " + std::to_string(done) +
                               ") had a non-finite loss or gradient norm (train.max_nonfinite_steps = " +
                               std::to_string(r_.train.max_nonfinite_steps) + ")" +
                     (resumed_from_.empty() ? "" : "; this session resumed from " + resumed_from_) + where);
    }
    if (last) break;
  }
  // Rank 0 could not write the run directory: the vote ended the loop at the next step (whose
  // checkpoint is saved), or the failure came on the last step; either way the run fails here.
  float log_failed_anywhere = log_error_.empty() ? 0.0f : 1.0f;
  groups_.world().all_reduce(&log_failed_anywhere, 1, parallel::ReduceOp::Max);
  if (log_failed_anywhere > 0) {
    checkpointer_->wait();
    throw JobError(rank_ != 0 ? "stopping: rank 0 could not write the run directory (see its message)"
                              : log_error_ + (r_.checkpoint.dir.empty() ? "" : " (a checkpoint of step " +
                                                 std::to_string(summary.steps) + " was saved first)"));
  }
  parallel::Watchdog::set_step(-1);
  if (r_.log.trace && !trace_.empty() && summary.steps < trace_to) write_trace();  // a run shorter than the window
  checkpointer_->wait();  // an async save must be complete before the run ends
  check_replicas();
  check_tied_embeddings();
  report_memory();
  if (op_timer_ && rank_ == 0)
    std::printf("time per op over the run (LOOM_PROFILE_OPS=1):\n%s", op_timer_->report().c_str());
  const int64_t timed_steps = summary.steps - start_step_ - 1;
  if (timed_steps > 0) summary.tokens_per_s = double(timed_steps) * r_.global_batch_resolved() * T / timed_s;
  parallel::Watchdog::stop();
  summary.resumable = summary.resumable && !summary.stopped_early.empty();
  if (run_record_)
    run_record_->finish(summary.steps, exit_status(summary),
                        summary.stopped_early.empty() ? "" : "stopped early: " + summary.stopped_early);
  return summary;
}

void Trainer::write_trace() {
  trace_.set_enabled(false);
  std::filesystem::create_directories(r_.log.dir);
  const std::string path = (std::filesystem::path(r_.log.dir) / ("trace_rank" + std::to_string(rank_) + ".json")).string();
  trace_.write(path);
  if (rank_ == 0) std::printf("loom: wrote Chrome traces %s/trace_rank*.json (chrome://tracing, ui.perfetto.dev)\n", r_.log.dir.c_str());
}

}  // namespace loom
