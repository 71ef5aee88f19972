// Trainer::size_buckets: parallel.bucket_mb auto's decision, taken once per session after its
// second step (parallel/bucket_sizing.hpp has the model; docs/parallelism.md "Bucket size").
#include <chrono>
#include <cstdio>

#include "engine/train/trainer.hpp"

namespace loom {

void Trainer::size_buckets(double backward_s) {
  const double from_mb = double(optim_->bucket_elems()) * sizeof(float) / double(1 << 20);
  const char* kept = r_.parallel.dp == 1                   ? "dp 1 reduces nothing"
                     : !optim_->can_resize_buckets()         ? "zero 2 and 3 lay their shards out by the buckets they start with"
                     : !r_.parallel.overlap_grad_reduce      ? "overlap_grad_reduce is false: no bucket starts before backward ends"
                                                             : nullptr;
  if (kept) {
    if (rank_ == 0) std::printf("loom: gradient buckets: %g MiB (auto: kept, %s)\n", from_mb, kept);
    return;
  }
  const auto t0 = std::chrono::steady_clock::now();
  const DistributedOptimizer::AutoBuckets a = optim_->auto_size_buckets(backward_s);
  const double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  if (rank_ != 0) return;
  std::printf("loom: gradient buckets: %g MiB (auto: dp bandwidth %.3f GB/s, latency %.3f ms%s, backward %.1f ms, "
              "%.2f MB of gradients on the wire; predicted %zu buckets, reduction %.1f ms, exposed %.1f ms; at %g MiB: "
              "%zu buckets, exposed %.1f ms; probe and re-plan took %.0f ms; from step %lld)\n",
              a.chosen.bucket_mb, a.probe.link.bytes_per_s / 1e9, a.probe.link.alpha_s * 1e3,
              a.probe.samples.empty() ? " (given by LOOM_BUCKET_LINK)" : "", a.backward_s * 1e3,
              double(model_->table().total()) * (r_.parallel.grad_reduce_dtype == "bf16" ? 2 : 4) / 1e6,
              a.chosen.buckets, a.chosen.reduce_s * 1e3, a.chosen.exposed_s * 1e3, from_mb, a.before.buckets,
              a.before.exposed_s * 1e3, took * 1e3, (long long)resumed_.steps_done + 3);
  nlohmann::json j = {{"bucket_mb", a.chosen.bucket_mb},
                      {"dp_bandwidth_gb_s", a.probe.link.bytes_per_s / 1e9},
                      {"dp_latency_ms", a.probe.link.alpha_s * 1e3},
                      {"backward_ms", a.backward_s * 1e3},
                      {"buckets", a.chosen.buckets},
                      {"predicted_reduce_ms", a.chosen.reduce_s * 1e3},
                      {"predicted_exposed_ms", a.chosen.exposed_s * 1e3},
                      {"from_step", resumed_.steps_done + 3}};
  for (const auto& [bytes, s] : a.probe.samples) j["probe"].push_back({{"bytes", bytes}, {"ms", s * 1e3}});
  record_in_run_json("grad_buckets_auto", std::move(j));
  std::fflush(stdout);
}

}  // namespace loom
