#pragma once
// The CUDA backend: the Backend interface (kernels/backend.hpp) on one GPU, fp32 storage and
// compute (matmuls through cuBLASLt with fp32 compute), kernels in kernels/cuda/*.cu. All ops
// run in order on one stream; reductions are deterministic. Builds with only the CUDA toolkit.
#include <memory>

#include "kernels/backend.hpp"

namespace loom {

// Throws std::runtime_error if `device` cannot be used.
std::unique_ptr<Backend> make_cuda_backend(int device = 0);

}  // namespace loom
