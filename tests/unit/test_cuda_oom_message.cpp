// The CUDA backend's out-of-memory exception, its host side only (runs without a GPU, so it is
// not skipped on CI): a refused cudaMalloc becomes a std::bad_alloc, as a host allocation's is,
// whose message says how much was asked for, where, and what the device had. The trainer turns
// it into its out-of-memory report (test_memory_room has that part). A real refused allocation,
// and the backend working on after it, is in test_cuda_ops (needs a GPU).
#include <catch2/catch.hpp>

#include <new>
#include <string>

#include "kernels/cuda/cuda_check.cuh"

TEST_CASE("a refused cudaMalloc is a std::bad_alloc saying how much and where", "[cuda]") {
  std::string what;
  try {
    loom::cuda::throw_device_oom(size_t(3) << 29, "kernels/cuda/cuda_backend.cu", 139);
  } catch (const std::bad_alloc& e) {
    what = e.what();
  }
  INFO(what);
  CHECK(what.rfind("GPU out of memory: cudaMalloc of 1536.0 MB failed at kernels/cuda/cuda_backend.cu:139 (", 0) == 0);
  // With a device: its free and total memory; without one (CI): said to be unknown.
  CHECK((what.find(" MB free of ") != std::string::npos || what.find("could not be read") != std::string::npos));
}
