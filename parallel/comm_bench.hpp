#pragma once
// `loom bench comm`: collectives timed in the style of nccl-tests. Each line reports the
// message size, time, algorithm bandwidth (bytes / time), bus bandwidth (algbw times the
// collective's factor: all-reduce 2(n-1)/n, reduce-scatter and all-gather (n-1)/n) and #wrong,
// the number of elements that differ from the exactly predictable result (inputs are small
// integers, so every sum is exact: in bf16 up to 56 ranks, in fp16 and fp32 far beyond).
// A size is in bytes: a bf16 line moves the bytes of the fp32 line of that size, twice the
// elements, so their algbw compare directly (count = bytes / dtype size).
//
// All-reduce and reduce-scatter may be timed under several algorithms (CommBenchOptions::algos:
// "mpi", "ring", "hierarchical", "auto" for MpiCommunicator; reduce-scatter has no hierarchical
// form and skips it), one line each per size, side by side; all-gather has one line, algo "-". With link_gbps set, a "%link" column gives busbw against
// the link's rate (link_gbps / 8 GB/s): the fraction of the wire the collective keeps busy.
#include <cstddef>
#include <functional>
#include <string>
#include <vector>

#include "parallel/communicator.hpp"

namespace loom::parallel {

// Where the benchmark's buffers live: host memory for MPI, device memory for NCCL.
struct BenchMemory {
  std::function<void*(size_t bytes)> alloc;
  std::function<void(void*)> release;
  std::function<void(void* dst, const void* host, size_t bytes)> upload;
  std::function<void(void* host, const void* src, size_t bytes)> download;
};
BenchMemory host_bench_memory();
BenchMemory device_bench_memory(int device);  // throws without CUDA

struct CommBenchOptions {
  size_t min_bytes = 1 << 10, max_bytes = size_t(256) << 20;
  int step_factor = 4;  // sizes grow by this factor
  int iters = 20, warmup = 2;
  std::string ops = "all_reduce,reduce_scatter,all_gather";
  DType dtype = DType::f32;  // fp32 | bf16 | fp16
  std::string note;          // printed in the header line (e.g. how MPI reduces bf16)
  // all_reduce, reduce_scatter: the algorithms to time, in this order, each selected by select_algo(name)
  // before its line; empty: the communicator as it is (algo column "-").
  std::vector<std::string> algos;
  std::function<void(const std::string&)> select_algo;
  double link_gbps = 0;  // > 0: add the "%link" column, busbw / (link_gbps / 8 GB/s)
};

// Collective over comm. Rank 0 prints the table to stdout. Returns the total #wrong.
long run_comm_bench(Communicator& comm, const BenchMemory& mem, const CommBenchOptions& o);

}  // namespace loom::parallel
