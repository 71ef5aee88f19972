#pragma once
// The CPU reference ops, templated on the scalar type: the backend uses float, the
// finite-difference tests use double. One function per op of kernels/backend_ops.def, with the
// signature written there (its `Real` is the template parameter here) and the semantics
// documented there. Each is defined in kernels/cpu/<op>.cpp and instantiated there for float and
// double.
//
// The reference's choices where the contract leaves them to the backend:
//   - attention_forward's `saved` (`att` in attention.cpp) is the softmax probabilities
//     (B,NH,T,T), zero above the diagonal; attention_backward does not read `out`.
//   - sum and sum_squares cut the buffer into fixed chunks summed in a fixed order whatever the
//     thread count (reduce.cpp).
#include <cstddef>
#include <cstdint>

namespace loom::cpu {

#define LOOM_OP(RET, NAME, PARAMS, ARGS) \
  template <typename Real>               \
  RET NAME PARAMS;
#include "kernels/backend_ops.def"

// Splits [0, n) into blocks of `block` columns for deterministic column-parallel reductions.
constexpr int kColumnBlock = 32;

}  // namespace loom::cpu
