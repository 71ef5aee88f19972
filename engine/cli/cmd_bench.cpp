// `loom bench gemm`: the machine's sgemm rate through the CPU backend's BLAS, the MFU
// denominator of CPU runs.
#include <cstdio>

#include "engine/cli/commands.hpp"
#include "kernels/backend.hpp"

namespace loom::cli {

int cmd_bench_gemm(int n, int reps) {
  const double flops = measure_sgemm_flops(n, reps);
  std::printf("sgemm n=%d reps=%d: %.1f GFLOP/s\n", n, reps, flops / 1e9);
  return 0;
}

}  // namespace loom::cli
