#pragma once
// The CPU reference ops, templated on the storage type of the op's compute-dtype tensors (Act):
// the backend uses float, bf16 and fp16 (train.precision), the finite-difference tests double.
// One function per op of kernels/backend_ops.def, with the signature written there (Act is Real*,
// Fp32 is acc_t<Real>*: float, or double in the double instantiation) and the semantics
// documented there. Each is defined in kernels/cpu/<op>.cpp and instantiated there for float,
// bf16, fp16 and double. Arithmetic is in acc_t<Real>; 16-bit values are converted on load and
// rounded once on store.
//
// The reference's choices where the contract leaves them to the backend:
//   - attention_forward's `saved` (`att` in attention.cpp) is the softmax probabilities
//     (B,NH,T,T), zero above the diagonal; attention_backward does not read `out`.
//   - sum and sum_squares cut the buffer into fixed chunks summed in a fixed order whatever the
//     thread count (reduce.cpp).
#include <cstddef>
#include <cstdint>

#include "kernels/dtype.hpp"

namespace loom::cpu {

#define LOOM_OP(RET, NAME, PARAMS, ARGS) \
  template <typename Real>               \
  RET NAME PARAMS;
#define Act Real*
#define CAct const Real*
#define Fp32 acc_t<Real>*
#define CFp32 const acc_t<Real>*
#define Scratch Real*
#define CScratch const Real*
#define Any TypedPtr
#define CAny ConstTypedPtr
#define Scalar acc_t<Real>
#include "kernels/backend_ops.def"

// Expands M(T) once per storage type every op is instantiated for (in each kernels/cpu/<op>.cpp).
#define LOOM_CPU_FOR_EACH_TYPE(M) M(float) M(double) M(bf16) M(fp16)

// Splits [0, n) into blocks of `block` columns for deterministic column-parallel reductions.
constexpr int kColumnBlock = 32;

}  // namespace loom::cpu
