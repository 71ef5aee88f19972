// Host AdamW and sum of squares for optimizer offload. Bit-for-bit with the CPU backend's ops:
//   - adamw_loop<false> is kernels/cpu/adamw.cpp's loop token for token (same expression order,
//     same float types, same `omp parallel for simd`; only an `if` clause added, which picks the
//     team size and leaves the loop body alone), and this file is compiled with the CPU
//     kernels' code-generation flags (engine/CMakeLists.txt takes them from loom_cpu_codegen):
//     where -march=native brings FMA, GCC contracts the same products into the same fused
//     multiply-adds in both (it fuses by default in C++: -ffp-contract=fast). Each element is a
//     fixed sequence of correctly rounded IEEE operations, so the vector body, the scalar tail and
//     the thread split give the same bits wherever an element falls.
//   - host_sum_squares is kernels/cpu/reduce.cpp's chunked sum.
#include "engine/optim/host_adamw.hpp"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

namespace loom {
namespace {

// Pieces below kParallelMin elements run on the calling thread (the `if` clause: no team to
// wake for a bias vector); the loop body is the same either way.
constexpr size_t kParallelMin = size_t(1) << 14;

// kScaled = false: the CPU backend's loop. kScaled = true: g = grad * grad_factor, rounded once
// (a product feeding only products, so never fused into an FMA), then the same arithmetic.
template <bool kScaled>
void adamw_loop(float* param, const float* grad, float* m, float* v, size_t n, float beta1, float beta2, float eps,
                float step, float decay, float bc2_sqrt, float grad_factor) {
  using T = float;
#pragma omp parallel for simd schedule(static) if (n >= kParallelMin)
  for (size_t i = 0; i < n; ++i) {
    T g;
    if constexpr (kScaled)
      g = grad[i] * grad_factor;
    else
      g = grad[i];
    const T mi = beta1 * m[i] + (T(1) - beta1) * g;
    const T vi = beta2 * v[i] + (T(1) - beta2) * g * g;
    m[i] = mi;
    v[i] = vi;
    param[i] = param[i] * decay - step * mi / (std::sqrt(vi) / bc2_sqrt + eps);
  }
}

constexpr size_t kChunk = 1 << 16;  // reduce.cpp's chunk: the sum's bits depend on it

}  // namespace

void host_adamw_update(float* param, const float* grad, float* m, float* v, size_t n, float lr, float beta1,
                       float beta2, float eps, float weight_decay, int64_t t, float grad_factor) {
  if (n == 0) return;
  using T = float;
  // As kernels/cpu/adamw.cpp: the bias corrections in double, rounded to float once.
  const T bc1 = T(1) - static_cast<T>(std::pow(double(beta1), double(t)));
  const T bc2_sqrt = static_cast<T>(std::sqrt(1.0 - std::pow(double(beta2), double(t))));
  const T step = lr / bc1;
  const T decay = T(1) - lr * weight_decay;
  // The first elements up to param's next 64-byte boundary go first, on their own, so that the
  // vector loop's accesses start on cache lines (when the arrays are packed alike, as the
  // optimizer's are): a piece starting mid-line ran ~25% slower (tests/bench/bench_host_adamw).
  // Each element's arithmetic is the same in either call, so the bits do not change.
  const size_t misaligned = reinterpret_cast<uintptr_t>(param) % 64;
  const size_t head = misaligned ? std::min(n, (64 - misaligned) / sizeof(float)) : 0;
  const auto loop = grad_factor == 1.0f ? &adamw_loop<false> : &adamw_loop<true>;
  if (head) loop(param, grad, m, v, head, beta1, beta2, eps, step, decay, bc2_sqrt, grad_factor);
  loop(param + head, grad + head, m + head, v + head, n - head, beta1, beta2, eps, step, decay, bc2_sqrt, grad_factor);
}

double host_sum_squares(const float* x, size_t n) {
  const size_t nchunks = (n + kChunk - 1) / kChunk;
  std::vector<double> partial(nchunks, 0.0);
#pragma omp parallel for schedule(static)
  for (size_t c = 0; c < nchunks; ++c) {
    const size_t i0 = c * kChunk, i1 = std::min(n, i0 + kChunk);
    double s = 0;
    for (size_t i = i0; i < i1; ++i) {
      const double a = static_cast<double>(x[i]);
      s += a * a;
    }
    partial[c] = s;
  }
  double total = 0;
  for (double p : partial) total += p;
  return total;
}

}  // namespace loom
