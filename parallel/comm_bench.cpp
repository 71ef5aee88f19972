#include "parallel/comm_bench.hpp"

#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <stdexcept>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "parallel/bucket_plan.hpp"

namespace loom::parallel {
namespace {

float value(size_t i, int rank) { return float((rank + 1) * int(i % 7 + 1)); }

struct Case {
  const char* name;
  double bus_factor;
};

// One op at one size: fills inputs, runs it once to check, then times `iters` runs.
long bench_one(Communicator& c, const BenchMemory& mem, const std::string& op, size_t count, int iters, int warmup,
               double& seconds) {
  const int n = c.size(), me = c.rank();
  const std::vector<size_t> parts = even_counts(count, n);
  size_t my_off = 0;
  for (int r = 0; r < me; ++r) my_off += parts[size_t(r)];
  std::vector<float> host(count), expect;
  float* buf = mem.alloc(count);
  float* out = mem.alloc(parts[size_t(me)] + 1);
  auto fill = [&] {
    if (op == "all_gather") {
      std::fill(host.begin(), host.end(), -1.0f);
      for (size_t j = 0; j < parts[size_t(me)]; ++j) host[my_off + j] = value(my_off + j, 0);
    } else {
      for (size_t i = 0; i < count; ++i) host[i] = value(i, me);
    }
    mem.upload(buf, host.data(), count);
  };
  auto run = [&] {
    if (op == "all_reduce") c.all_reduce(buf, count, ReduceOp::Sum);
    else if (op == "reduce_scatter") c.reduce_scatter(buf, out, parts);
    else c.all_gather(buf, parts);
  };
  // Check pass.
  fill();
  run();
  long wrong = 0;
  const float rank_sum = float(n * (n + 1) / 2);
  if (op == "reduce_scatter") {
    std::vector<float> got(parts[size_t(me)]);
    mem.download(got.data(), out, got.size());
    for (size_t j = 0; j < got.size(); ++j) wrong += got[j] != float((my_off + j) % 7 + 1) * rank_sum;
  } else {
    mem.download(host.data(), buf, count);
    for (size_t i = 0; i < count; ++i)
      wrong += host[i] != (op == "all_reduce" ? float(i % 7 + 1) * rank_sum : value(i, 0));
  }
  // Timed passes (values are not re-initialised: the result is no longer checked).
  for (int w = 0; w < warmup; ++w) run();
  c.barrier();
  auto t0 = std::chrono::steady_clock::now();
  for (int it = 0; it < iters; ++it) run();
  c.barrier();
  seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() / iters;
  mem.release(buf);
  mem.release(out);
  return wrong;
}

}  // namespace

BenchMemory host_bench_memory() {
  return {[](size_t n) { return static_cast<float*>(std::calloc(std::max<size_t>(n, 1), sizeof(float))); },
          [](float* p) { std::free(p); },
          [](float* d, const float* h, size_t n) { std::memcpy(d, h, n * sizeof(float)); },
          [](float* h, const float* s, size_t n) { std::memcpy(h, s, n * sizeof(float)); }};
}

long run_comm_bench(Communicator& comm, const BenchMemory& mem, const CommBenchOptions& o) {
  const int n = comm.size();
  if (comm.rank() == 0) {
    std::printf("# loom bench comm: backend %s, %d ranks, %d iterations (+%d warm-up) per size\n",
                comm.backend().c_str(), n, o.iters, o.warmup);
    std::printf("# %14s %12s %-15s %11s %12s %12s %7s\n", "size(B)", "count", "op", "time(us)", "algbw(GB/s)",
                "busbw(GB/s)", "#wrong");
  }
  long total_wrong = 0;
  std::string ops = o.ops + ",";
  for (size_t pos = 0, next; (next = ops.find(',', pos)) != std::string::npos; pos = next + 1) {
    const std::string op = ops.substr(pos, next - pos);
    if (op.empty()) continue;
    if (op != "all_reduce" && op != "reduce_scatter" && op != "all_gather")
      throw std::runtime_error("bench comm: unknown op '" + op + "' (all_reduce, reduce_scatter, all_gather)");
    const double factor = op == "all_reduce" ? 2.0 * (n - 1) / n : double(n - 1) / n;
    for (size_t bytes = o.min_bytes; bytes <= o.max_bytes; bytes *= size_t(o.step_factor)) {
      const size_t count = bytes / sizeof(float);
      // Fewer timed runs for large messages keeps the whole sweep to seconds.
      const int iters = std::max(2, std::min(o.iters, int((size_t(64) << 20) / std::max<size_t>(bytes, 1))));
      double s = 0;
      long wrong = bench_one(comm, mem, op, count, iters, o.warmup, s);
      // The slowest rank's time is the collective's time; #wrong summed over ranks.
      double smax = s;
      long wsum = wrong;
      MPI_Allreduce(&s, &smax, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
      MPI_Allreduce(&wrong, &wsum, 1, MPI_LONG, MPI_SUM, MPI_COMM_WORLD);
      total_wrong += wsum;
      if (comm.rank() == 0) {
        const double algbw = double(bytes) / smax / 1e9;
        std::printf("  %14zu %12zu %-15s %11.1f %12.3f %12.3f %7ld\n", bytes, count, op.c_str(), smax * 1e6, algbw,
                    algbw * factor, wsum);
        std::fflush(stdout);
      }
    }
  }
  if (comm.rank() == 0) std::printf("# total #wrong: %ld\n", total_wrong);
  return total_wrong;
}

}  // namespace loom::parallel
