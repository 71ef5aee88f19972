// Picks the backend a recipe asks for. Asking for CUDA where it cannot run is a clear error.
#include <stdexcept>

#include "kernels/backend.hpp"
#include "kernels/backend_factory.hpp"
#ifdef LOOM_HAVE_CUDA
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
    // The CUDA ops exist (kernels/cuda, make_cuda_backend, checked op by op against this CPU
    // backend by test_cuda_ops); training on them needs device-buffer communicators (NCCL) and
    // device-side data handling in the trainer, which are not wired yet.
    throw BackendError("train.backend=cuda: CUDA devices found (" + probe.names +
                       ") and the CUDA ops are built, but training on them (NCCL communicators, device buffers in "
                       "the trainer) is not wired yet; use train.backend=cpu");
#else
    throw BackendError("train.backend=cuda but this loom was built without CUDA (LOOM_CUDA=OFF or no nvcc at "
                       "configure time); rebuild with the CUDA toolkit or use train.backend=cpu");
#endif
  }
  throw BackendError("unknown backend '" + name + "' (expected cpu or cuda)");
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
