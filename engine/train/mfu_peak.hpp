// What MFU is measured against, per rank: LOOM_PEAK_TFLOPS where it is set, else the backend's
// own figure. The peak is a property of the machine, not of the run, so it is an environment
// variable (a site profile or the batch script sets it), not a recipe key.
#pragma once

#include <string>

#include "kernels/backend.hpp"
#include "parallel/mpi_communicator.hpp"

namespace loom {

struct MfuPeak {
  double flops = 0;    // per rank, FLOP/s in the compute dtype
  std::string source;  // "LOOM_PEAK_TFLOPS", "measured" (the CPU's gemm rate) or "device" (SMs x clock)
};

// LOOM_PEAK_TFLOPS's text as FLOP/s: "" (not set) is 0; anything else must be a positive, finite
// number of TFLOP/s, or the error names the variable and what it holds.
double parse_peak_tflops(const std::string& text);

// override_flops > 0 (parse_peak_tflops) wins; else the backend's peak_flops, which on the CPU is
// a measurement (best of 5 sgemm products of 1536^2, about 0.3-0.5 s of the cores).
MfuPeak mfu_peak(double override_flops, Backend& backend, DType compute);

// Collective over `world`: rank 0's figure (MFU is rank 0's peak times the world), measured by
// rank 0 alone; the other ranks get {}. Rank 0's LOOM_PEAK_TFLOPS holds for every rank, so a bad
// value, or a failed measurement, is every rank's error.
MfuPeak rank0_mfu_peak(parallel::MpiCommunicator& world, Backend& backend, DType compute);

}  // namespace loom
