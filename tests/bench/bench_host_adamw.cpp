// Host AdamW (engine/optim/host_adamw.hpp, the offloaded optimizer's update) against the memory
// bandwidth it is bound by, and next to the CPU backend's adamw_update (the same loop). Not a
// test: run by hand,
//   build/tests/bench_host_adamw [n]          (n fp32 parameters, default 16M: 448 MB of traffic)
// with OMP_NUM_THREADS as the trainer would run. AdamW moves 28 bytes per parameter (reads
// param, grad, m, v; writes param, m, v); the limit is a loop with exactly that traffic and an
// add per element (`same-traffic add`), measured in the same run on the same arrays, interleaved
// with the others. The sum of squares is printed next to the CPU backend's (4 bytes read per
// element).
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <vector>

#include "engine/optim/host_adamw.hpp"
#include "kernels/backend.hpp"

using namespace loom;

namespace {

// The best of `reps` runs, seconds (after one warm-up: page faults, thread start).
double best_seconds(const std::function<void()>& f, int reps = 10) {
  f();
  double best = 1e30;
  for (int r = 0; r < reps; ++r) {
    const auto t0 = std::chrono::steady_clock::now();
    f();
    best = std::min(best, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  return best;
}

void row(const char* what, double seconds, double bytes, double limit_gbs) {
  const double gbs = bytes / seconds / 1e9;
  std::printf("%-38s %9.3f ms %8.2f GB/s", what, seconds * 1e3, gbs);
  if (limit_gbs > 0) std::printf("   %5.2f of the limit", gbs / limit_gbs);
  std::printf("\n");
}

}  // namespace

int main(int argc, char** argv) {
  const size_t n = argc > 1 ? std::strtoull(argv[1], nullptr, 10) : size_t(16) << 20;
  std::printf("host AdamW, n = %zu fp32 parameters, %d OpenMP threads\n", n, omp_get_max_threads());
  // Arrays aligned as the offloaded optimizer's staging memory is (64 bytes on the CPU backend,
  // a page from cudaMallocHost).
  auto cpu = make_cpu_backend();
  const size_t bytes = (n * sizeof(float) + 63) / 64 * 64;
  auto host_array = [&] { return static_cast<float*>(std::aligned_alloc(64, bytes)); };
  float *P = host_array(), *G = host_array(), *M = host_array(), *V = host_array();
  const auto init = [&] {  // a plausible state: no denormals, v > 0
    for (size_t i = 0; i < n; ++i) {
      P[i] = float(i % 1000) * 1e-3f;
      G[i] = float(i % 97) * 1e-4f - 4.85e-3f;
      M[i] = 1e-4f;
      V[i] = 1e-6f;
    }
  };
  init();
  const double adamw_bytes = 28.0 * double(n);
  int64_t t = 1;
  volatile float zero = 0.0f;  // unknown to the compiler: the limit loop is not folded away
  auto adamw = [&](size_t off, float factor) {
    return [=, &t] {
      host_adamw_update(P + off, G + off, M + off, V + off, n - off, 1e-3f, 0.9f, 0.95f, 1e-8f, 0.1f, t++, factor);
    };
  };
  struct Case {
    const char* what;
    std::function<void()> run;
    double best = 1e30;
  };
  std::vector<Case> cases = {
      {"same-traffic add (the limit)",
       [&] {
         const float k = zero;  // adds k * grad: the same traffic, and the state left as it was
#pragma omp parallel for simd schedule(static)
         for (size_t i = 0; i < n; ++i) {
           const float x = k * G[i];
           P[i] += x;
           M[i] += x;
           V[i] += x;
         }
       }},
      {"host_adamw_update", adamw(0, 1.0f)},
      {"host_adamw_update, grad_factor", adamw(0, 0.37f)},
      // A piece that starts 4 bytes past a cache line (a tensor at an odd offset of the buffer).
      {"host_adamw_update, 4 bytes off", adamw(1, 1.0f)},
      {"CPU backend adamw_update",
       [&] { cpu->adamw_update(P, G, M, V, n, 1e-3f, 0.9f, 0.95f, 1e-8f, 0.1f, t++); }},
      {"CPU backend adamw_update, 4 bytes off",
       [&] { cpu->adamw_update(P + 1, G + 1, M + 1, V + 1, n - 1, 1e-3f, 0.9f, 0.95f, 1e-8f, 0.1f, t++); }},
  };
  // Interleaved rounds, the best of each: this machine's neighbours make single runs noisy.
  for (int round = 0; round < 3; ++round)
    for (Case& c : cases) c.best = std::min(c.best, best_seconds(c.run, 5));
  const double limit = adamw_bytes / cases[0].best / 1e9;
  for (const Case& c : cases) row(c.what, c.best, adamw_bytes, &c == &cases[0] ? 0 : limit);

  // The sum of squares adds in double, in order, within each 64K chunk (its bits are the CPU
  // backend's): bound by the add latency, not by memory. Side by side with the backend's.
  const double sum_bytes = 4.0 * double(n);
  volatile double sink = 0;
  row("host_sum_squares", best_seconds([&] { sink = host_sum_squares(G, n); }), sum_bytes, 0);
  row("CPU backend sum_squares", best_seconds([&] { sink = cpu->sum_squares(G, n); }), sum_bytes, 0);
  (void)sink;
  for (float* a : {P, G, M, V}) std::free(a);
  return 0;
}
