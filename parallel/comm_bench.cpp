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

// Inputs: small integers, exact in every dtype. A rank contributes (rank % 2 + 1) * (i % 3 + 1),
// so a sum over n ranks is at most 3 * 1.5n: exact in bf16 (8 significant bits) up to 56 ranks.
float value(size_t i, int rank) { return float((rank % 2 + 1) * int(i % 3 + 1)); }
float rank_weight_sum(int n) { return float(n + n / 2); }  // sum over r < n of (r % 2 + 1)

// Host staging in the benchmark's dtype.
struct HostBuf {
  DType dtype;
  std::vector<char> bytes;
  HostBuf(DType t, size_t n) : dtype(t), bytes(n * dtype_size(t)) {}
  void set(size_t i, float v) {
    if (dtype == DType::f32) reinterpret_cast<float*>(bytes.data())[i] = v;
    else if (dtype == DType::bf16) reinterpret_cast<bf16*>(bytes.data())[i] = bf16(v);
    else reinterpret_cast<fp16*>(bytes.data())[i] = fp16(v);
  }
  float get(size_t i) const {
    if (dtype == DType::f32) return reinterpret_cast<const float*>(bytes.data())[i];
    if (dtype == DType::bf16) return float(reinterpret_cast<const bf16*>(bytes.data())[i]);
    return float(reinterpret_cast<const fp16*>(bytes.data())[i]);
  }
};

// One op at one size: fills inputs, runs it once to check, then times `iters` runs.
long bench_one(Communicator& c, const BenchMemory& mem, const std::string& op, DType t, size_t count, int iters,
               int warmup, double& seconds) {
  const int n = c.size(), me = c.rank();
  const size_t es = dtype_size(t);
  const std::vector<size_t> parts = even_counts(count, n);
  size_t my_off = 0;
  for (int r = 0; r < me; ++r) my_off += parts[size_t(r)];
  HostBuf host(t, count);
  TypedPtr buf(mem.alloc(count * es), t);
  TypedPtr out(mem.alloc((parts[size_t(me)] + 1) * es), t);
  auto fill = [&] {
    if (op == "all_gather") {
      for (size_t i = 0; i < count; ++i) host.set(i, -1.0f);
      for (size_t j = 0; j < parts[size_t(me)]; ++j) host.set(my_off + j, value(my_off + j, 0));
    } else {
      for (size_t i = 0; i < count; ++i) host.set(i, value(i, me));
    }
    mem.upload(buf.data, host.bytes.data(), count * es);
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
  const float weights = rank_weight_sum(n);
  if (op == "reduce_scatter") {
    HostBuf got(t, parts[size_t(me)]);
    mem.download(got.bytes.data(), out.data, got.bytes.size());
    for (size_t j = 0; j < parts[size_t(me)]; ++j) wrong += got.get(j) != float((my_off + j) % 3 + 1) * weights;
  } else {
    mem.download(host.bytes.data(), buf.data, count * es);
    for (size_t i = 0; i < count; ++i)
      wrong += host.get(i) != (op == "all_reduce" ? float(i % 3 + 1) * weights : value(i, 0));
  }
  // Timed passes (values are not re-initialised: the result is no longer checked).
  for (int w = 0; w < warmup; ++w) run();
  c.barrier();
  auto t0 = std::chrono::steady_clock::now();
  for (int it = 0; it < iters; ++it) run();
  c.barrier();
  seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() / iters;
  mem.release(buf.data);
  mem.release(out.data);
  return wrong;
}

}  // namespace

BenchMemory host_bench_memory() {
  return {[](size_t bytes) { return std::calloc(std::max<size_t>(bytes, 1), 1); }, [](void* p) { std::free(p); },
          [](void* d, const void* h, size_t bytes) { std::memcpy(d, h, bytes); },
          [](void* h, const void* s, size_t bytes) { std::memcpy(h, s, bytes); }};
}

long run_comm_bench(Communicator& comm, const BenchMemory& mem, const CommBenchOptions& o) {
  const int n = comm.size();
  if (o.dtype != DType::f32 && o.dtype != DType::bf16 && o.dtype != DType::f16)
    throw std::runtime_error(std::string("bench comm: dtype ") + dtype_name(o.dtype) + " (fp32, bf16 or fp16)");
  if (comm.rank() == 0) {
    std::printf("# loom bench comm: backend %s, %d ranks, dtype %s%s%s, %d iterations (+%d warm-up) per size\n",
                comm.backend().c_str(), n, dtype_name(o.dtype), o.note.empty() ? "" : ", ", o.note.c_str(), o.iters,
                o.warmup);
    if (o.link_gbps > 0) std::printf("# link: %.3g Gbit/s = %.4f GB/s\n", o.link_gbps, o.link_gbps / 8);
    std::printf("# %14s %12s %-15s %-13s %11s %12s %12s%s %7s\n", "size(B)", "count", "op", "algo", "time(us)",
                "algbw(GB/s)", "busbw(GB/s)", o.link_gbps > 0 ? "    %link" : "", "#wrong");
  }
  long total_wrong = 0;
  std::string ops = o.ops + ",";
  for (size_t pos = 0, next; (next = ops.find(',', pos)) != std::string::npos; pos = next + 1) {
    const std::string op = ops.substr(pos, next - pos);
    if (op.empty()) continue;
    if (op != "all_reduce" && op != "reduce_scatter" && op != "all_gather")
      throw std::runtime_error("bench comm: unknown op '" + op + "' (all_reduce, reduce_scatter, all_gather)");
    const double factor = op == "all_reduce" ? 2.0 * (n - 1) / n : double(n - 1) / n;
    // One line per algorithm and size: the algorithms of one size side by side. Reduce-scatter
    // follows the same setting, but has no hierarchical form of its own (it rings), so no line.
    std::vector<std::string> algos;
    if (op != "all_gather")
      for (const std::string& a : o.algos)
        if (op == "all_reduce" || a != "hierarchical") algos.push_back(a);
    if (algos.empty()) algos.push_back("-");
    for (size_t bytes = o.min_bytes; bytes <= o.max_bytes; bytes *= size_t(o.step_factor)) {
      for (const std::string& algo : algos) {
        if (algo != "-" && o.select_algo) o.select_algo(algo);
        const size_t count = bytes / dtype_size(o.dtype);
        // Fewer timed runs for large messages keeps the whole sweep to seconds.
        const int iters = std::max(2, std::min(o.iters, int((size_t(64) << 20) / std::max<size_t>(bytes, 1))));
        double s = 0;
        long wrong = bench_one(comm, mem, op, o.dtype, count, iters, o.warmup, s);
        // The slowest rank's time is the collective's time; #wrong summed over ranks.
        double smax = s;
        long wsum = wrong;
        MPI_Allreduce(&s, &smax, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
        MPI_Allreduce(&wrong, &wsum, 1, MPI_LONG, MPI_SUM, MPI_COMM_WORLD);
        total_wrong += wsum;
        if (comm.rank() == 0) {
          const double algbw = double(bytes) / smax / 1e9, busbw = algbw * factor;
          char link[32] = "";
          if (o.link_gbps > 0) std::snprintf(link, sizeof link, " %7.1f%%", 100 * busbw / (o.link_gbps / 8));
          std::printf("  %14zu %12zu %-15s %-13s %11.1f %12.3f %12.3f%s %7ld\n", bytes, count, op.c_str(),
                      algo.c_str(), smax * 1e6, algbw, busbw, link, wsum);
          std::fflush(stdout);
        }
      }
    }
  }
  if (comm.rank() == 0) std::printf("# total #wrong: %ld\n", total_wrong);
  return total_wrong;
}

}  // namespace loom::parallel
