// Picks the backend a recipe asks for. Asking for CUDA where it cannot run is a clear error.
#include <stdexcept>

#include "kernels/backend.hpp"
#include "kernels/backend_factory.hpp"
#include <dlfcn.h>
#include <unistd.h>

#include <climits>

#ifdef LOOM_HAVE_CUDA
#include "kernels/cuda/cuda_probe.hpp"
#endif

namespace loom {

#ifdef LOOM_HAVE_CUDA
namespace {
// The CUDA backend lives in libloom_cuda.so next to the binary (or in ../lib), loaded only now:
// CPU runs never map cuBLASLt.
std::unique_ptr<Backend> load_cuda_backend(int device, const std::string& asked) {
  char exe[PATH_MAX] = {};
  const ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
  std::string dir = n > 0 ? std::string(exe, size_t(n)) : std::string(".");
  dir = dir.substr(0, dir.find_last_of('/') == std::string::npos ? 0 : dir.find_last_of('/'));
  std::string tried;
  void* lib = nullptr;
  for (const std::string& path : {dir + "/libloom_cuda.so", dir + "/../lib/libloom_cuda.so", std::string("libloom_cuda.so")}) {
    lib = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (lib) break;
    tried += "\n  " + path + ": " + dlerror();
  }
  if (!lib) throw BackendError(asked + ": cannot load the CUDA backend module:" + tried);
  using Create = Backend* (*)(int, char*, int);
  auto create = reinterpret_cast<Create>(dlsym(lib, "loom_cuda_create_backend"));
  if (!create) throw BackendError(asked + ": libloom_cuda.so has no loom_cuda_create_backend");
  char error[512] = {};
  Backend* be = create(device, error, int(sizeof error));
  if (!be) throw BackendError(asked + ": " + error);
  return std::unique_ptr<Backend>(be);  // the module stays loaded for the life of the process
}
}  // namespace
#endif

std::unique_ptr<Backend> make_backend(const std::string& name, int device, const std::string& key) {
  if (name == "cpu") return make_cpu_backend();
  const std::string asked = key + "=" + name;
  if (name == "cuda") {
#ifdef LOOM_HAVE_CUDA
    cuda::DeviceProbe probe = cuda::probe_devices();
    if (probe.count == 0)
      throw BackendError(asked + " but no CUDA device is usable here (" + probe.reason + "); use " + key +
                         "=cpu or run on a GPU node");
    return load_cuda_backend(device, asked);
#else
    (void)device;
    throw BackendError(asked + " but this loom was built without CUDA (LOOM_CUDA=OFF or no nvcc at configure time); "
                       "rebuild with the CUDA toolkit or use " + key + "=cpu");
#endif
  }
  throw BackendError(asked + ": unknown backend (expected cpu or cuda)");
}

int cuda_device_for_local_rank(int local_rank) {
#ifdef LOOM_HAVE_CUDA
  const int count = cuda::probe_devices().count;
  return count > 0 && local_rank >= 0 ? local_rank % count : 0;
#else
  (void)local_rank;
  return 0;
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
