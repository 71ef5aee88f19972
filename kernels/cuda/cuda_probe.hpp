#pragma once
// Asks the CUDA runtime how many devices there are, without ever aborting: on a machine with
// the toolkit but no driver (CI, login nodes) the answer is 0 with the runtime's reason.
#include <string>

namespace loom::cuda {

struct DeviceProbe {
  int count = 0;
  std::string reason;  // why count is 0 (the CUDA runtime's message), empty otherwise
  std::string names;   // "0: NVIDIA H100 80GB HBM3 (sm_90, 79 GiB); ..."
};

DeviceProbe probe_devices();

// Bytes in use on the current device (cudaMemGetInfo: total - free, every process and context
// included), or -1 if the runtime cannot say. Loom allocates its buffers up front and frees
// nothing while it trains, so the figure after some steps is its peak (benchmarks report it).
long long device_memory_used_bytes();

}  // namespace loom::cuda
