// Deterministic reductions: the buffer is cut into fixed 64K-element chunks, each chunk summed
// in order in double, and the chunk sums added in order. The result does not depend on the
// number of threads, which the global gradient norm (and hence clipping) relies on.
#include <vector>

#include "kernels/cpu/cpu_ops.hpp"

namespace loom::cpu {
namespace {
constexpr size_t kChunk = 1 << 16;

template <typename T, typename F>
double chunked_sum(const T* x, size_t n, F term) {
  const size_t nchunks = (n + kChunk - 1) / kChunk;
  std::vector<double> partial(nchunks, 0.0);
#pragma omp parallel for schedule(static)
  for (size_t c = 0; c < nchunks; ++c) {
    const size_t i0 = c * kChunk, i1 = std::min(n, i0 + kChunk);
    double s = 0;
    for (size_t i = i0; i < i1; ++i) s += term(static_cast<double>(x[i]));
    partial[c] = s;
  }
  double total = 0;
  for (double p : partial) total += p;
  return total;
}
}  // namespace

template <typename T>
double sum_squares(const acc_t<T>* x, size_t n) {
  return chunked_sum(x, n, [](double a) { return a * a; });
}
template <typename T>
double sum(const acc_t<T>* x, size_t n) {
  return chunked_sum(x, n, [](double a) { return a; });
}

template double sum_squares<float>(const float*, size_t);
template double sum_squares<double>(const double*, size_t);
template double sum<float>(const float*, size_t);
template double sum<double>(const double*, size_t);
// The 16-bit instantiations read fp32 buffers (CFp32), as the float one.
template double sum_squares<bf16>(const float*, size_t);
template double sum_squares<fp16>(const float*, size_t);
template double sum<bf16>(const float*, size_t);
template double sum<fp16>(const float*, size_t);

}  // namespace loom::cpu
