// `loom bench gemm`: the machine's gemm rate through the CPU backend, the MFU denominator of CPU
// runs: fp32 through OpenBLAS sgemm, bf16 through the backend's bf16 matmul (oneDNN where the
// build has it; see CpuBackend::precision_note).
#include <cstdio>
#include <string>

#include "engine/cli/commands.hpp"
#include "kernels/backend.hpp"

namespace loom::cli {

int cmd_bench_gemm(int n, int reps, const std::string& dtype) {
  if (dtype == "bf16") {
    const double flops = measure_bf16_gemm_flops(n, reps);
    std::printf("bf16 gemm n=%d reps=%d: %.1f GFLOP/s (bf16 in and out, fp32 accumulation)\n", n, reps, flops / 1e9);
    const std::string note = make_cpu_backend()->precision_note(DType::bf16);
    if (!note.empty()) std::printf("note: %s\n", note.c_str());
    return 0;
  }
  const double flops = measure_sgemm_flops(n, reps);
  std::printf("sgemm n=%d reps=%d: %.1f GFLOP/s\n", n, reps, flops / 1e9);
  return 0;
}

}  // namespace loom::cli
