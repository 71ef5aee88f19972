#include "engine/train/trainer.hpp"

#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <stdexcept>
#include <thread>
#include <vector>

#include "engine/checkpoint/lora_manifest.hpp"
#include "engine/config/recipe_io.hpp"
#include "engine/train/cpu_threads.hpp"
#include "engine/train/evaluation.hpp"
#include "engine/train/one_rank_per_gpu.hpp"
#include "engine/train/stop_request.hpp"
#include "engine/util/job_error.hpp"
#include "engine/util/memory_room.hpp"
#include "kernels/backend_factory.hpp"
#include "parallel/host_collectives.hpp"
#include "parallel/launcher_env.hpp"
#include "parallel/mpi_world.hpp"
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
      batch_(r_),
      // Rank 0's setting for every rank (a launcher may not pass the variable to all of them):
      // the ranks must decide alike.
      goodput_timing_(timing_override(
          parallel::broadcast_string(groups.world(), std::getenv("LOOM_GOODPUT_TIMING") ? std::getenv("LOOM_GOODPUT_TIMING") : "")
              .c_str())),
      trace_(groups.world_rank()),
      faults_(FaultInjection::from_env()),
      started_(std::chrono::steady_clock::now()) {
  // From here the communication watchdog runs (parallel.timeout_s), through set-up too, so it
  // watches NCCL's initialisation, where a peer that never joins used to leave the others
  // inside ncclCommInitRank for ever. (Set-up's agreements on errors stay unwatched, as
  // host_collectives.hpp says: the others may legitimately wait long there for one rank's data
  // or checkpoint checks.) Collective: every rank starts it here; stopped by watchdog_'s
  // destructor, also when the constructor throws.
  watchdog_.start(r_.parallel.timeout_s, rank_);
  // The CPU backend's OpenMP threads, before anything runs OpenMP code (the data's checks scan
  // every token). Collective on every rank, whatever its backend (cpu_threads.hpp).
  {
    const ThreadChoice threads = settle_cpu_threads(
        [&](const std::string& s) { return parallel::all_gather_strings(groups.world(), s); }, rank_,
        r_.train.backend == "cpu");
    cpu_threads_note_ = threads.note;
    if (r_.train.backend == "cpu") cpu_threads_ = {{"per_rank", omp_get_max_threads()}, {"source", threads.source}};
  }
  // Data first: a bad path or shard is reported before any model memory is allocated.
  const auto& m = r_.model;
  layout_ = LoaderLayout{m.seq_len, r_.train.micro_batch, r_.grad_accum(), groups.coord().dp, r_.parallel.dp,
                         r_.train.seed};
  DataFingerprint train_print, val_print;
  TokenDataset train = open_data(&train_print, &val_print);
  compute_ = r_.train.precision == "bf16" ? DType::bf16 : r_.train.precision == "fp16" ? DType::f16 : DType::f32;
  LossScaleConfig scaling;
  scaling.enabled = compute_ == DType::f16;
  scaling.initial = r_.train.loss_scale_init;
  scaling.growth_interval = r_.train.loss_scale_growth_interval;
  scaling.backoff = r_.train.loss_scale_backoff;
  scaler_ = std::make_unique<LossScaler>(scaling);
  // One device per rank, from its rank on the node: the backend, NCCL and NVML all use this one.
  // A node whose GPU is unusable fails alone: agreed, as the data.
  const int device = r_.train.backend == "cuda" ? cuda_device_for_local_rank(groups.local_rank()) : 0;
  parallel::agreed(groups.world(), [&] { backend_ = make_backend(r_.train.backend, device); });
  if (const char* prof = std::getenv("LOOM_PROFILE_OPS"); prof && std::string(prof) == "1") {
    auto timer = std::make_unique<OpTimer>(std::move(backend_));
    op_timer_ = timer.get();
    backend_ = std::move(timer);
  }
  // MFU against rank 0's peak times the world, measured by rank 0 alone on the CPU (about half a
  // second of the cores, with the threads it trains with) and before the model exists, so that
  // the measurement's matrices (28 MB in fp32) come and go below the run's peak memory, as
  // `loom plan` assumes.
  peak_ = rank0_mfu_peak(groups.world(), *backend_, compute_);
  // Device buffers over NCCL (CUDA), host buffers over MPI; host scalars (losses, norms) always MPI.
  use_device_communicators(groups, *backend_, device);
  // The memory this rank may take, read before the collective below: past it the ranks allocate,
  // and a rank reading later would see its neighbours' models in its cgroup's usage as well as
  // in the ranks-on-node multiple of the prediction (memory_check.hpp).
  const MemoryRoom room = memory_room();
  // Collective: every rank's host name (for run.json, and to count the ranks sharing this node).
  const std::vector<std::string> hosts = gather_hostnames(groups);
  build_model(hosts, room);
  step_ = std::make_unique<TrainStep>(
      *model_, *optim_, groups, trace_,
      StepShape{r_.train.micro_batch, m.seq_len, m.d_model, r_.grad_accum(), r_.global_batch_resolved(),
                r_.parallel.overlap_grad_reduce, r_.train.seed, r_.log.noise_scale, batch_.adaptive()},
      *scaler_);
  noise_ = NoiseScale(r_.log.noise_ema);
  if (rank_ == 0 && r_.log.noise_scale && step_->small_batch() == SmallBatch::None)
    std::printf("loom: note: log.noise_scale: the gradient noise scale is not measured here (it needs dp >= 2 or "
                "gradient accumulation, and under ZeRO-2/3 or at dp 1 no pipeline stages)\n");
  schedule_ = lr_schedule_of(r_);
  // Resume (checkpoint.resume), then start the loader where the checkpoint's left off.
  CheckpointSetup setup = checkpoint_setup(r_);
  setup.base_path = lora_base_path_;
  setup.base_fingerprint = lora_base_fingerprint_;
  checkpointer_ = std::make_unique<Checkpointer>(std::move(setup), groups, *model_, *optim_);
  resumed_ = checkpointer_->resume();
  check_lora_base();
  scaler_->restore(resumed_.loss_scale);
  noise_.restore(resumed_.noise);
  // goodput: a resumed run goes on at the batch its checkpoint was at.
  const std::string batch_note = resumed_.path.empty() ? "" : batch_.resume_at(resumed_.data.global_batch);
  step_->set_batch(int(batch_.batch() / batch_.unit()), batch_.batch());
  const SampleIndex train_index(train, m.seq_len);
  data_now_ = DataNow{uint64_t(r_.train.seed), batch_.batch(), int64_t(train_index.size()),
                      batch_.adaptive(),           train_print,  val_print, train_index.blend_order()};
  const LoaderState start = resume_position();
  if (rank_ == 0 && r_.checkpoint.dir.empty() && r_.train.stop_at_step > resumed_.steps_done &&
      r_.train.stop_at_step < r_.train.steps)
    std::fprintf(stderr, "loom: warning: train.stop_at_step=%lld without checkpoint.dir: nothing is saved there, so "
                 "running again starts over (exit status 4); set checkpoint.dir to continue later\n",
                 (long long)r_.train.stop_at_step);
  announce_resume(batch_note);
  LoaderLayout train_layout = layout_;  // layout_ keeps the recipe's accumulation (validation batches)
  train_layout.micro_steps = int(batch_.batch() / batch_.unit());
  train_data_ = std::make_unique<DataLoader>(std::move(train), train_layout, 2, start);
  // Collective: before rank 0's own work below.
  if (r_.log.trace) trace_prefix_ = agreed_trace_prefix();
  // What rank 0 alone writes may fail on rank 0 alone (the CLI makes every rank agree on that error).
  if (rank_ == 0) {
    const double tokens = double(r_.global_batch_resolved()) * m.seq_len;
    logger_ = std::make_unique<StepLogger>(
        r_.log, LogRates{tokens, model_->shape().flops_per_token(), peak_.flops * groups.layout().world(),
                         resumed_.steps_done, r_.train.steps, started_, m.seq_len,
                         batch_.adaptive() ? batch_.progress(train_data_->state().next_sample) / double(r_.train.steps) : -1});
    start_run_record(command, hosts);
    record_in_run_json("mfu_peak", {{"flops_per_rank", peak_.flops}, {"source", peak_.source}});
    if (!cpu_threads_.is_null()) record_in_run_json("cpu_threads", cpu_threads_);
    note_resize();
    logger_->start_tensorboard();
  }
  reports_ = std::make_unique<RankReports>(groups, backend_->name() == "cuda", backend_->device_pci_bus_id());
}

Trainer::~Trainer() = default;  // watchdog_ stops the watchdog

TrainSummary Trainer::run() {
  print_header();
  nlohmann::json memory_start = reports_->report_memory(*model_, *optim_, r_.grad_accum_max(), "at start");
  record_in_run_json("memory_start", std::move(memory_start));
  TrainSummary summary;
  summary.start_step = summary.steps = steps_done_ = resumed_.steps_done;
  RunGuard guard(r_.train, r_.model.vocab_size, resumed_.health.first_bad_step, resumed_.path, rank_, started_,
                 !r_.checkpoint.dir.empty());
  double timed_s = 0, last_wait = 0;
  double max_save_s = 0;  // the longest save so far: the room train.max_minutes leaves for the last one
  // A stop signal while blocked in a call that a dead rank will never complete aborts at once.
  parallel::Watchdog::set_stop_probe(&stop_signal);
  const int64_t start = resumed_.steps_done, trace_from = start + 1, trace_to = trace_end();
  // train.stop_at_step ends this session there; a run resumed at or past it has nothing to do
  // (it used to train on to train.steps).
  // batch_policy goodput: the run ends when its budget of sequences is trained, whatever the steps.
  const int64_t steps = batch_.adaptive() ? INT64_MAX : r_.train.steps;
  const int64_t end = r_.train.stop_at_step > 0 ? std::min(steps, r_.train.stop_at_step) : steps;
  bool batch_changed = false;  // the step after a change (its data was not prepared ahead) is not timed
  for (int64_t step = start; step < end && !batch_.budget_done(train_data_->state().next_sample); ++step) {
    parallel::Watchdog::set_step(step);
    trace_.set_enabled(r_.log.trace && step >= trace_from && step < trace_to);
    const auto t0 = std::chrono::steady_clock::now();
    // The stream position before the step: the schedule's progress under goodput.
    const int64_t samples = train_data_->state().next_sample;
    const int64_t gb = batch_.next_batch(samples);
    if (gb != int64_t(train_data_->micro_steps()) * batch_.unit()) {
      apply_batch(gb);
      batch_changed = true;
    }
    StepBatch batch;
    {
      TraceRecorder::Span span(&trace_, "data", "data");
      batch = train_data_->next();
    }
    if (faults_.sleep_rank == rank_ && faults_.sleep_step == step + 1) {
      std::fprintf(stderr, "loom: rank %d: LOOM_FAULT: sleeping %.0f s inside step %lld\n", rank_, faults_.sleep_s,
                   (long long)step + 1);
      std::this_thread::sleep_for(std::chrono::duration<double>(faults_.sleep_s));
    }
    const double lr = batch_.lr(schedule_, step, samples, gb, noise_.b_simple());
    const parallel::CommVolume comm_before = groups_.device_volume();
    const StepResult res = step_->run(batch, step + 1, lr, faults_.nan_steps.count(step + 1) > 0,
                                      faults_.overflow_steps.count(step + 1) > 0);
    const parallel::CommVolume comm = groups_.device_volume() - comm_before;
    summary.comm_wait_s += res.comm_wait_s;
    if (res.reduce_s >= 0 && summary.grad_reduce_s >= 0)
      summary.grad_reduce_s += res.reduce_s;
    else
      summary.grad_reduce_s = -1;
    guard.after_step(step, res);
    if (res.skipped) ++summary.skipped_steps;
    backend_->synchronize();
    const double dt = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (step > start) timed_s += dt, timed_samples_ += double(gb);
    if (batch_.adaptive() && step > start && !batch_changed) batch_.observe(gb / batch_.unit(), dt, res.compute_s);
    batch_changed = false;
    // The schedule always runs to train.steps; stop_at_step only ends this run early.
    const int64_t done = step + 1;
    const bool at_end = batch_.adaptive() ? batch_.budget_done(samples + gb) : done == r_.train.steps;
    const StopVote vote = guard.vote(step, dt, max_save_s, !log_error_.empty(), groups_.world(), at_end);
    if (!vote.stopped_early.empty()) summary.stopped_early = vote.stopped_early;
    const bool last = at_end || done == r_.train.stop_at_step || guard.too_many_bad() ||
                      vote.stop_now || vote.log_failed;
    StepRecord rec{step, res.loss, -1, lr, res.grad_norm, dt, 0, res.comm_wait_s, res.skipped};
    rec.backward_s = res.backward_s;
    if (batch_.adaptive()) {
      rec.global_batch = gb;
      rec.budget_done = batch_.progress(samples + gb) / double(r_.train.steps);
    }
    if (r_.parallel.dp > 1) rec.grad_reduce_s = res.reduce_s;
    rec.loss_scale = scaler_->enabled() ? res.loss_scale : 0;
    rec.comm = comm;
    if (res.b_small > 0) {
      if (!res.skipped) noise_.add(res.small_sq, res.b_small, res.grad_norm * res.grad_norm, double(gb));
      rec.grad_norm_small = std::sqrt(res.small_sq);
      rec.b_simple = noise_.b_simple();
    }
    const bool eval_due = !guard.too_many_bad() && due(r_.log.eval_every, done, last);  // the same on every rank
    if (!val_batches_.empty() && eval_due) {
      TraceRecorder::Span span(&trace_, "evaluation", "compute");
      rec.val_loss = summary.final_val_loss = evaluate(*model_, groups_, val_batches_, layout_.micro_steps);
    }
    if (!choice_items_.empty() && eval_due) {
      TraceRecorder::Span span(&trace_, "choices", "compute");
      score_choice_items(rec);
      if (rec.choice_acc_norm >= 0) summary.final_choice_acc_norm = rec.choice_acc_norm;
    }
    if (!res.skipped) summary.final_loss = res.loss;
    summary.steps = steps_done_ = done;
    if (step % r_.log.every == 0 || last || rec.val_loss >= 0 || (!choice_items_.empty() && eval_due) ||
        res.skipped) {  // the same on every rank
      const RankHealth health = reports_->gather_health(dt);
      rec.data_wait_s = train_data_->wait_seconds() - last_wait;
      if (logger_ && log_error_.empty()) {
        try {
          logger_->log(rec, health);
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
    // Before the checkpoint: it records the batch the next step trains at (a resume goes on there).
    // A stop (stop_at_step, a signal, max_minutes) still decides: the resumed run must go on at
    // the batch an uninterrupted one would have.
    if (batch_.due(done) && !at_end && !guard.too_many_bad()) decide_batch(done);
    if (!r_.checkpoint.dir.empty() && due(r_.checkpoint.every, done, last)) {
      const double save_s = save_checkpoint(done, summary, guard.first_bad_step());
      summary.resumable = true;
      summary.checkpoint_stall_s += save_s;
      max_save_s = std::max(max_save_s, save_s);
    }
    if (r_.log.trace && done == trace_to) write_trace();
    if (guard.too_many_bad()) fail_non_finite(done, guard);
    if (last) break;
    // bucket_mb auto: decided between the session's second and third steps (the first warms up),
    // on every rank at once (the same step, the same `last`).
    if (r_.parallel.bucket_mb == 0 && step == start + 1) size_buckets(res.backward_s);
  }
  finish_run(summary, timed_s);
  return summary;
}

double Trainer::save_checkpoint(int64_t done, const TrainSummary& summary, int64_t first_bad_step) {
  TraceRecorder::Span span(&trace_, "checkpoint save", "checkpoint");
  const SavedDataPosition data{train_data_->state(),      data_now_.seed, true, data_now_.global_batch,
                               data_now_.samples_per_epoch, int64_t(data_now_.data.tokens), data_now_.data.crc32c,
                               data_now_.val.tokens > 0 ? int64_t(data_now_.val.tokens) : -1, data_now_.val.crc32c,
                               data_now_.blend};
  return checkpointer_->save(done, data, StateHealth{summary.final_loss, first_bad_step}, scaler_->state(),
                             noise_.state());
}

void Trainer::fail_non_finite(int64_t done, const RunGuard& guard) {
  checkpointer_->wait();
  std::string where;
  if (!r_.checkpoint.dir.empty()) {
    where = "; the state after the last update is saved as step " + std::to_string(done) + " (marked not clean)";
    if (rank_ == 0) {  // rank 0 alone reads checkpoint.dir
      const std::string clean = checkpointer_->last_clean_checkpoint(guard.first_bad_step());
      where += "; the last clean checkpoint is " + (clean.empty() ? std::string("(none)") : clean) +
               (clean.empty() ? "" : ": resume from it with --set checkpoint.resume=" + clean);
    }
  }
  throw JobError(std::to_string(guard.consecutive_bad()) + " steps in a row (to step " + std::to_string(done) +
                 ") had a non-finite loss or gradient norm (train.max_nonfinite_steps = " +
                 std::to_string(r_.train.max_nonfinite_steps) + ")" +
                 (resumed_.path.empty() ? "" : "; this session resumed from " + resumed_.path) + where);
}

void Trainer::finish_run(TrainSummary& summary, double timed_s) {
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
  if (r_.log.trace && !trace_.empty() && summary.steps < trace_end()) write_trace();  // a run shorter than the window
  checkpointer_->wait();  // an async save must be complete before the run ends
  reports_->check_replicas(*model_);
  reports_->check_tied_embeddings(*model_);
  nlohmann::json memory_end = reports_->report_memory(*model_, *optim_, r_.grad_accum_max(), "at the end");
  record_in_run_json("memory_end", std::move(memory_end));
  if (op_timer_ && rank_ == 0)
    std::printf("time per op over the run (LOOM_PROFILE_OPS=1):\n%s", op_timer_->report().c_str());
  const int64_t timed_steps = summary.steps - resumed_.steps_done - 1;
  if (timed_steps > 0)
    summary.tokens_per_s = timed_samples_ * r_.model.seq_len / timed_s;
  parallel::Watchdog::stop();
  // train.stop_at_step is a pause to continue from: without checkpoint.dir nothing of it is kept,
  // and the run ends as a signal's would (exit status 4), not as done.
  if (summary.stopped_early.empty() && r_.checkpoint.dir.empty() && r_.train.stop_at_step > 0 &&
      summary.steps == r_.train.stop_at_step && summary.steps < r_.train.steps && summary.steps > summary.start_step)
    summary.stopped_early = "train.stop_at_step";
  summary.resumable = summary.resumable && !summary.stopped_early.empty();
  if (run_record_)
    run_record_->finish(summary.steps, exit_status(summary),
                        summary.stopped_early.empty() ? "" : "stopped early: " + summary.stopped_early);
}

}  // namespace loom
