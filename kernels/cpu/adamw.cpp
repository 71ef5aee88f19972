// AdamW in PyTorch's formulation: p *= 1 - lr*wd; p -= lr/bc1 * m / (sqrt(v)/sqrt(bc2) + eps).
#include <cmath>

#include "kernels/cpu/cpu_ops.hpp"

namespace loom::cpu {

template <typename Storage>
void adamw_update(acc_t<Storage>* param, const acc_t<Storage>* grad, acc_t<Storage>* m, acc_t<Storage>* v, size_t n,
                  acc_t<Storage> lr, acc_t<Storage> beta1, acc_t<Storage> beta2, acc_t<Storage> eps, acc_t<Storage> weight_decay,
                  int64_t t) {
  using T = acc_t<Storage>;  // every tensor here is fp32 (double in the double instantiation)
  const T bc1 = T(1) - static_cast<T>(std::pow(double(beta1), double(t)));
  const T bc2_sqrt = static_cast<T>(std::sqrt(1.0 - std::pow(double(beta2), double(t))));
  const T step = lr / bc1;
  const T decay = T(1) - lr * weight_decay;
#pragma omp parallel for simd schedule(static)
  for (size_t i = 0; i < n; ++i) {
    const T g = grad[i];
    const T mi = beta1 * m[i] + (T(1) - beta1) * g;
    const T vi = beta2 * v[i] + (T(1) - beta2) * g * g;
    m[i] = mi;
    v[i] = vi;
    param[i] = param[i] * decay - step * mi / (std::sqrt(vi) / bc2_sqrt + eps);
  }
}

template void adamw_update<float>(float*, const float*, float*, float*, size_t, float, float, float, float, float,
                                  int64_t);
template void adamw_update<double>(double*, const double*, double*, double*, size_t, double, double, double, double,
                                   double, int64_t);
// The 16-bit instantiations are the float one (every tensor of the optimizer is fp32).
template void adamw_update<bf16>(float*, const float*, float*, float*, size_t, float, float, float, float, float,
                                 int64_t);
template void adamw_update<fp16>(float*, const float*, float*, float*, size_t, float, float, float, float, float,
                                 int64_t);

}  // namespace loom::cpu
