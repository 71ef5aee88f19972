#pragma once
// How a backend calls its ops from the run-time typed Backend interface (the CPU backend: its
// templated ops, cpu_ops.hpp; the CUDA backend: its launchers):
// the op runs at the dtype of its typed tensors (call_dtype), instantiated at the
// matching storage type (dispatch), and each typed pointer is checked against the parameter it
// is passed to (unwrap: a bf16 buffer handed where the op runs in fp32 throws, naming the op).
#include <stdexcept>
#include <string>
#include <type_traits>
#include <utility>

#include "kernels/dtype.hpp"

// Strips one pair of parentheses: LOOM_TYPED_UNPAREN (a, b) is a, b.
#define LOOM_TYPED_UNPAREN(...) __VA_ARGS__

namespace loom::typed {

template <typename T>
struct TypeTag {
  using type = T;
};

// The dtype of the first non-null typed pointer among the arguments; fp32 if there is none (the
// optimizer and reduction ops, whose tensors are always fp32).
inline DType call_dtype() { return DType::f32; }
template <typename A, typename... Rest>
DType call_dtype(const A& a, const Rest&... rest) {
  if constexpr (std::is_same_v<A, TypedPtr> || std::is_same_v<A, ConstTypedPtr>) {
    if (a.data) return a.dtype;
  }
  return call_dtype(rest...);
}

// Runs f(TypeTag<T>{}) for the storage type T of `dtype`.
template <typename F>
decltype(auto) dispatch(const char* op, DType dtype, F&& f) {
  switch (dtype) {
    case DType::f32: return f(TypeTag<float>{});
    case DType::bf16: return f(TypeTag<bf16>{});
    case DType::f16: return f(TypeTag<fp16>{});
    default: break;
  }
  throw std::logic_error(std::string("backend op ") + op + " has no " + dtype_name(dtype) + " form");
}

// A typed pointer on its way to a T* / const T* parameter (or a TypedPtr one: convert).
struct MutableArg {
  TypedPtr p;
  template <typename U>
  operator U*() const { return p.as<U>(); }
  operator TypedPtr() const { return p; }
};
struct ConstArg {
  ConstTypedPtr p;
  template <typename U>
  operator const U*() const { return p.as<U>(); }
  operator ConstTypedPtr() const { return p; }
};
// Backend-private scratch: whatever the op's template says it holds.
struct ScratchArg {
  void* p;
  template <typename U>
  operator U*() const { return static_cast<U*>(p); }
};
struct ConstScratchArg {
  const void* p;
  template <typename U>
  operator const U*() const { return static_cast<const U*>(p); }
};

inline MutableArg unwrap(TypedPtr p) { return {p}; }
inline ConstArg unwrap(ConstTypedPtr p) { return {p}; }
inline ScratchArg unwrap(void* p) { return {p}; }
inline ConstScratchArg unwrap(const void* p) { return {p}; }
template <typename A>
A&& unwrap(A&& a) {
  return std::forward<A>(a);
}

}  // namespace loom::typed
