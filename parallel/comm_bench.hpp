#pragma once
// `loom bench comm`: collectives timed in the style of nccl-tests. Each line reports the
// message size, time, algorithm bandwidth (bytes / time), bus bandwidth (algbw times the
// collective's factor: all-reduce 2(n-1)/n, reduce-scatter and all-gather (n-1)/n) and #wrong,
// the number of elements that differ from the exactly predictable result (inputs are small
// integers, so every float sum is exact).
#include <cstddef>
#include <functional>
#include <string>

#include "parallel/communicator.hpp"

namespace loom::parallel {

// Where the benchmark's buffers live: host memory for MPI, device memory for NCCL.
struct BenchMemory {
  std::function<float*(size_t)> alloc;
  std::function<void(float*)> release;
  std::function<void(float* dst, const float* host, size_t n)> upload;
  std::function<void(float* host, const float* src, size_t n)> download;
};
BenchMemory host_bench_memory();
BenchMemory device_bench_memory(int device);  // throws without CUDA

struct CommBenchOptions {
  size_t min_bytes = 1 << 10, max_bytes = size_t(256) << 20;
  int step_factor = 4;  // sizes grow by this factor
  int iters = 20, warmup = 2;
  std::string ops = "all_reduce,reduce_scatter,all_gather";
};

// Collective over comm. Rank 0 prints the table to stdout. Returns the total #wrong.
long run_comm_bench(Communicator& comm, const BenchMemory& mem, const CommBenchOptions& o);

}  // namespace loom::parallel
