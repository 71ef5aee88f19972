// Picks the backend a recipe asks for. Asking for CUDA where it cannot run is a clear error.
#include <stdexcept>

#include "kernels/backend.hpp"
#include "kernels/backend_factory.hpp"
#include <cstdlib>

#ifdef LOOM_HAVE_CUDA
#include "kernels/cuda/cuda_backend.hpp"
#include "kernels/cuda/cuda_probe.hpp"
#endif

namespace loom {

std::unique_ptr<Backend> make_backend(const std::string& name) {
  if (name == "cpu") return make_cpu_backend();
  if (name == "cuda") {
#ifdef LOOM_HAVE_CUDA
    cuda::DeviceProbe probe = cuda::probe_devices();
    if (probe.count == 0)
      throw BackendError("train.backend=cuda but no CUDA device is usable here (" + probe.reason +
                         "); use train.backend=cpu or run on a GPU node");
    // fp32 CUDA backend, one device per rank; NOT YET RUN on a GPU (docs/kernels.md).
    return make_cuda_backend(cuda_device_for_this_rank());
#else
    throw BackendError("train.backend=cuda but this loom was built without CUDA (LOOM_CUDA=OFF or no nvcc at "
                       "configure time); rebuild with the CUDA toolkit or use train.backend=cpu");
#endif
  }
  throw BackendError("unknown backend '" + name + "' (expected cpu or cuda)");
}

int cuda_device_for_this_rank() {
  int local = 0;
  for (const char* var : {"OMPI_COMM_WORLD_LOCAL_RANK", "SLURM_LOCALID", "MPI_LOCALRANKID", "LOCAL_RANK"})
    if (const char* v = std::getenv(var)) {
      local = std::atoi(v);
      break;
    }
#ifdef LOOM_HAVE_CUDA
  const int count = cuda::probe_devices().count;
  return count > 0 ? local % count : 0;
#else
  return local;
#endif
}

std::string backend_availability() {
#ifdef LOOM_HAVE_CUDA
  cuda::DeviceProbe probe = cuda::probe_devices();
  return probe.count > 0 ? "cpu, cuda (" + probe.names + ")" : "cpu (cuda compiled in; no device: " + probe.reason + ")";
#else
  return "cpu (cuda not compiled in)";
#endif
}

}  // namespace loom
