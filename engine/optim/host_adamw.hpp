#pragma once
// The optimizer's arithmetic on host arrays, for optimizer offload (`optim.offload: cpu`): the
// fp32 master weights, the moments and the update live in host memory and the CPU updates them
// while the device runs backward. Plain functions over packed fp32 arrays: no Backend, no state.
//
// Bits: with grad_factor == 1, host_adamw_update gives exactly the bits of the CPU backend's
// adamw_update (kernels/cpu/adamw.cpp: the same loop, compiled with the same code-generation
// flags, engine/CMakeLists.txt); host_sum_squares gives exactly the bits of its sum_squares
// (kernels/cpu/reduce.cpp: the same chunks, summed in the same order). An offloaded run on the
// CPU backend therefore matches a run without offload bit for bit. Both are OpenMP-parallel;
// results do not depend on the thread count, nor on how a buffer is cut into calls.
#include <cstddef>
#include <cstdint>

namespace loom {

// AdamW in PyTorch's formulation over n packed elements, each gradient first multiplied by
// grad_factor (the loss-scale unscale and the clip coefficient folded into one factor):
//   g = grad * grad_factor
//   m = beta1 * m + (1 - beta1) * g;  v = beta2 * v + (1 - beta2) * g * g
//   param = param * (1 - lr * wd) - lr / bc1 * m / (sqrt(v) / sqrt(bc2) + eps)
// with bc1 = 1 - beta1^t, bc2 = 1 - beta2^t computed in double (t counts updates from 1).
// grad_factor == 1 skips the multiply (the CPU backend's loop exactly); any other factor gives
// the bits of the CPU backend's `scale(grad, n, grad_factor)` followed by its adamw_update (the
// product is rounded once, as the scale op rounds it). param, m, v are updated in place; grad is
// read only. The arrays must not overlap one another; n may be 0.
void host_adamw_update(float* param, const float* grad, float* m, float* v, size_t n, float lr, float beta1,
                       float beta2, float eps, float weight_decay, int64_t t, float grad_factor = 1.0f);

// The sum of x[i]^2 in double, in the CPU backend's order (fixed 64K-element chunks, each summed in
// order, the chunk sums added in order): the same bits as its sum_squares for any thread count.
double host_sum_squares(const float* x, size_t n);

}  // namespace loom
