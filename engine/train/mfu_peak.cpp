#include "engine/train/mfu_peak.hpp"

#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <stdexcept>

#include "parallel/host_collectives.hpp"
#include "parallel/mpi_world.hpp"

namespace loom {

double parse_peak_tflops(const std::string& text) {
  if (text.empty()) return 0;
  errno = 0;
  char* end = nullptr;
  const double tflops = std::strtod(text.c_str(), &end);
  // Whole text a number (strtod skips leading blanks only), positive, and finite in FLOP/s too.
  if (end == text.c_str() || *end != '\0' || errno == ERANGE || !(tflops > 0) || !std::isfinite(tflops * 1e12))
    throw std::runtime_error("LOOM_PEAK_TFLOPS='" + text +
                             "': expected a positive number, the peak TFLOP/s of one rank in the compute dtype "
                             "(e.g. 989 for an H100 SXM in bf16), or leave it unset for the backend's own figure");
  return tflops * 1e12;
}

MfuPeak mfu_peak(double override_flops, Backend& backend, DType compute) {
  if (override_flops > 0) return {override_flops, "LOOM_PEAK_TFLOPS"};
  return {backend.peak_flops(compute), backend.name() == "cpu" ? "measured" : "device"};
}

MfuPeak rank0_mfu_peak(parallel::MpiCommunicator& world, Backend& backend, DType compute) {
  const char* env = std::getenv("LOOM_PEAK_TFLOPS");
  const double override_flops = parse_peak_tflops(parallel::broadcast_string(world, env ? env : ""));
  MfuPeak peak;
  parallel::agreed(
      world, [&] { if (world.rank() == 0) peak = mfu_peak(override_flops, backend, compute); },
      "measuring the MFU peak (set LOOM_PEAK_TFLOPS to skip it): ");
  return peak;
}

}  // namespace loom
