// The MLP's linear layer + GELU pairs of backend_ops.def, on the CPU: the two reference ops one
// after the other (their results are the definition a fused backend is checked against).
#include "kernels/cpu/cpu_ops.hpp"

namespace loom::cpu {

template <typename T>
void matmul_gelu_forward(T* out, T* pre, const T* inp, const T* w, const T* bias, int N, int C, int OC) {
  matmul_forward<T>(pre, inp, w, bias, N, C, OC);
  gelu_forward<T>(out, pre, size_t(N) * size_t(OC));
}

template <typename T>
void matmul_backward_gelu(T* dinp, acc_t<T>* dw, acc_t<T>* dbias, const T* dout, const T* inp, const T* w,
                          const T* pre, int N, int C, int OC) {
  matmul_backward<T>(dinp, dw, dbias, dout, inp, w, N, C, OC);
  if (dinp) gelu_backward<T>(dinp, pre, dinp, size_t(N) * size_t(C));
}

#define LOOM_INSTANTIATE(T)                                                                      \
  template void matmul_gelu_forward<T>(T*, T*, const T*, const T*, const T*, int, int, int);   \
  template void matmul_backward_gelu<T>(T*, acc_t<T>*, acc_t<T>*, const T*, const T*, const T*, const T*, int, \
                                        int, int);
LOOM_CPU_FOR_EACH_TYPE(LOOM_INSTANTIATE)
#undef LOOM_INSTANTIATE

}  // namespace loom::cpu
