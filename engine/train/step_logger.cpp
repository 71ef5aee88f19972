#include "engine/train/step_logger.hpp"

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

namespace loom {
namespace {
// The step's communication volume in MB (1e6 bytes): the payload of each kind the engine uses
// (all-reduce, reduce-scatter, all-gather, send/recv; broadcast only when called) and the ring
// model's wire bytes of all of them (parallel/comm_volume.hpp).
void add_comm_fields(const parallel::CommVolume& v, std::vector<std::pair<std::string, double>>& fields) {
  using K = parallel::CommKind;
  auto mb = [&](K k) { return double(v.payload_bytes(k)) / 1e6; };
  fields.insert(fields.end(), {{"comm_allreduce_mb", mb(K::AllReduce)},
                               {"comm_reducescatter_mb", mb(K::ReduceScatter)},
                               {"comm_allgather_mb", mb(K::AllGather)},
                               {"comm_sendrecv_mb", mb(K::SendRecv)}});
  if (v.call_count(K::Broadcast) > 0) fields.emplace_back("comm_broadcast_mb", mb(K::Broadcast));
  fields.emplace_back("comm_wire_mb", double(v.total_wire()) / 1e6);
}

// loss/loss, loss/val_loss, eval/choice_acc(_norm), comm/<what> for comm_<what>_mb, perf/<key> for the rest (comm_wait_ms,
// grad_reduce_ms and grad_reduce_hidden included).
std::string tensorboard_tag(const std::string& key) {
  if (key == "loss" || key == "val_loss") return "loss/" + key;
  if (key.rfind("choice_", 0) == 0) return "eval/" + key;
  if (key.rfind("comm_", 0) == 0 && key != "comm_wait_ms") return "comm/" + key.substr(5);
  if (key == "b_simple" || key == "grad_norm_small") return "noise/" + key;
  if (key == "global_batch") return "batch/" + key;
  return "perf/" + key;
}
}  // namespace

StepLogger::StepLogger(const LogConfig& log, LogRates rates) : log_(log), rates_(rates) {
  metrics_ = std::make_unique<MetricsLog>(log.dir, rates_.start_step);
}

void StepLogger::start_tensorboard() {
  if (log_.tensorboard) tensorboard_ = std::make_unique<TensorBoardWriter>(log_.dir, rates_.start_step);
}

void StepLogger::log(const StepRecord& s, const RankHealth& h) {
  const double tokens = s.global_batch > 0 ? double(s.global_batch) * rates_.seq_len : rates_.tokens_per_step;
  const double tok_s = tokens / s.step_s;
  const double mfu = rates_.flops_per_token * tok_s / rates_.peak_flops_all;
  std::vector<std::pair<std::string, double>> fields = {
      {"step", double(s.step)}, {"loss", s.loss}, {"lr", s.lr}, {"grad_norm", s.grad_norm}};
  if (s.val_loss >= 0) fields.emplace_back("val_loss", s.val_loss);
  if (s.choice_acc >= 0) fields.insert(fields.end(), {{"choice_acc", s.choice_acc}, {"choice_acc_norm", s.choice_acc_norm}});
  fields.insert(fields.end(), {{"tokens_per_s", tok_s},
                               {"mfu", mfu},
                               {"step_ms", s.step_s * 1e3},
                               {"data_wait_ms", s.data_wait_s * 1e3},
                               {"comm_wait_ms", s.comm_wait_s * 1e3},
                               {"backward_ms", s.backward_s * 1e3},
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
  // The fraction of the gradient reduction that backward hid: 1 - exposed wait / reduction time.
  const bool timed = s.grad_reduce_s > 0;
  const double hidden = timed ? std::clamp(1.0 - s.comm_wait_s / s.grad_reduce_s, 0.0, 1.0) : 0;
  if (timed) fields.insert(fields.end(), {{"grad_reduce_ms", s.grad_reduce_s * 1e3}, {"grad_reduce_hidden", hidden}});
  if (s.comm.total_calls() > 0) add_comm_fields(s.comm, fields);
  if (s.loss_scale > 0) fields.emplace_back("loss_scale", s.loss_scale);
  if (s.grad_norm_small >= 0) fields.emplace_back("grad_norm_small", s.grad_norm_small);
  if (s.b_simple >= 0) fields.emplace_back("b_simple", s.b_simple);
  if (s.global_batch > 0) fields.emplace_back("global_batch", double(s.global_batch));
  if (s.skipped) fields.emplace_back("skipped", 1);
  metrics_->write(fields);
  if (tensorboard_) {
    std::vector<std::pair<std::string, double>> tb;
    for (const auto& [k, v] : fields)
      if (k != "step" && k != "slowest_rank") tb.emplace_back(tensorboard_tag(k), v);
    tensorboard_->scalars(s.step + 1, tb);  // TensorBoard's step is the number of steps done
  }
  // ETA from this session's mean step time so far.
  const double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - rates_.started).count();
  const double per_step = elapsed / double(s.step + 1 - rates_.start_step);
  double eta_s = per_step * double(rates_.total_steps - s.step - 1);
  char of[48];
  std::snprintf(of, sizeof of, "/%lld", (long long)rates_.total_steps);
  if (s.budget_done >= 0) {  // goodput: steps vary in size; the ETA follows the budget trained
    const double rate = (s.budget_done - rates_.start_fraction) / elapsed;
    eta_s = rate > 0 ? std::max(0.0, 1 - s.budget_done) / rate : 0;
    std::snprintf(of, sizeof of, " (%.1f%%, batch %lld)", 100 * s.budget_done, (long long)s.global_batch);
  }
  char val[64] = "", eta[32], reduce[64] = "", noise[48] = "";
  if (s.b_simple >= 0) std::snprintf(noise, sizeof noise, " | B_simple %.0f", s.b_simple);
  if (timed) std::snprintf(reduce, sizeof reduce, " of %.1f ms reduction (%.0f%% hidden)", s.grad_reduce_s * 1e3, 100 * hidden);
  if (s.val_loss >= 0) std::snprintf(val, sizeof val, " | val %.4f", s.val_loss);
  if (s.choice_acc_norm >= 0)
    std::snprintf(val + std::strlen(val), sizeof val - std::strlen(val), " | acc_norm %.4f", s.choice_acc_norm);
  if (eta_s >= 3600)
    std::snprintf(eta, sizeof eta, "%dh%02dm", int(eta_s / 3600), int(eta_s / 60) % 60);
  else
    std::snprintf(eta, sizeof eta, "%dm%02ds", int(eta_s / 60), int(eta_s) % 60);
  std::printf("step %6lld%s | loss %.4f%s | lr %.3e | grad norm %.3f | %.0f tok/s | MFU %.1f%% | %.0f ms | "
              "data wait %.1f ms | comm wait %.1f ms%s | mem %.0f MB | slowest rank %d +%.0f ms%s | ETA %s%s\n",
              (long long)s.step + 1, of, s.loss, val, s.lr, s.grad_norm, tok_s, 100 * mfu,
              s.step_s * 1e3, s.data_wait_s * 1e3, s.comm_wait_s * 1e3, reduce, h.rss_mb, h.slowest_rank,
              h.slowest_ms - h.median_ms, noise, eta, s.skipped ? " | SKIPPED (non-finite)" : "");
  std::fflush(stdout);
}

}  // namespace loom
