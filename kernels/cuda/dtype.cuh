#pragma once
// The storage types of the CUDA kernels and how a launcher picks one at run time (llm.c's floatX,
// chosen per call from the dtype of the op's Act tensors instead of at compile time):
//   float, __nv_bfloat16, __half   storage; every kernel loads to float (load), computes and
//                                  accumulates in float, and rounds once to nearest even when it
//                                  stores (store<T>).
//   act_dtype(op, ...)             the dtype all the non-null Act tensors of one call share (a
//                                  std::logic_error naming the op if they differ or are not
//                                  fp32/bf16/fp16).
//   dispatch_act(op, dtype, f)     f(T{}) for the storage type T of that dtype.
//   act<T>(p), act_mut<T>(p)       the typed pointer as T* (null stays null).
//   load_w<T, W>, store_w<T, W>    W consecutive elements through one 16-byte access (W = 16 /
//                                  sizeof(T)), or one element (W = 1); vector_width<T>() is W.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>
#include <cstring>
#include <stdexcept>
#include <string>

#include "kernels/dtype.hpp"

namespace loom::cuda {

__device__ __forceinline__ float load(float x) { return x; }
__device__ __forceinline__ float load(__nv_bfloat16 x) { return __bfloat162float(x); }
__device__ __forceinline__ float load(__half x) { return __half2float(x); }

template <typename T>
__device__ __forceinline__ T store(float x);
template <>
__device__ __forceinline__ float store<float>(float x) { return x; }
template <>
__device__ __forceinline__ __nv_bfloat16 store<__nv_bfloat16>(float x) { return __float2bfloat16_rn(x); }
template <>
__device__ __forceinline__ __half store<__half>(float x) { return __float2half_rn(x); }

// The elements of storage type S in one 16-byte access.
template <typename S>
constexpr int vector_width() {
  return int(16 / sizeof(S));
}

// W consecutive elements through one access: W = vector_width<S>() (p 16-byte aligned), or 1.
template <typename S, int W>
__device__ __forceinline__ void load_w(float (&x)[W], const S* p) {
  if constexpr (W == 1) {
    x[0] = load(*p);
  } else {
    static_assert(W * sizeof(S) == 16, "a vector access is 16 bytes");
    const uint4 raw = *reinterpret_cast<const uint4*>(p);
    S v[W];
    memcpy(v, &raw, 16);
    for (int k = 0; k < W; ++k) x[k] = load(v[k]);
  }
}
template <typename S, int W>
__device__ __forceinline__ void store_w(S* p, const float (&x)[W]) {
  if constexpr (W == 1) {
    *p = store<S>(x[0]);
  } else {
    S v[W];
    for (int k = 0; k < W; ++k) v[k] = store<S>(x[k]);
    uint4 raw;
    memcpy(&raw, v, 16);
    *reinterpret_cast<uint4*>(p) = raw;
  }
}

// The cuBLASLt / CUDA data type of a storage type.
template <typename T>
constexpr cudaDataType_t cuda_type_of();
template <>
constexpr cudaDataType_t cuda_type_of<float>() { return CUDA_R_32F; }
template <>
constexpr cudaDataType_t cuda_type_of<__nv_bfloat16>() { return CUDA_R_16BF; }
template <>
constexpr cudaDataType_t cuda_type_of<__half>() { return CUDA_R_16F; }

// The DType of a storage type.
template <typename T>
constexpr DType dtype_of_storage();
template <>
constexpr DType dtype_of_storage<float>() { return DType::f32; }
template <>
constexpr DType dtype_of_storage<__nv_bfloat16>() { return DType::bf16; }
template <>
constexpr DType dtype_of_storage<__half>() { return DType::f16; }

[[noreturn]] inline void act_dtype_error(const char* op, const std::string& what) {
  throw std::logic_error(std::string("CUDA op ") + op + ": " + what);
}

inline void act_dtype_merge(const char*, DType&, bool&) {}
// The dtype of the non-null typed pointers among the arguments (all must agree).
template <typename P, typename... Rest>
void act_dtype_merge(const char* op, DType& dt, bool& found, const P& p, const Rest&... rest) {
  if (p.data) {
    if (!found) {
      dt = p.dtype;
      found = true;
    } else if (p.dtype != dt) {
      act_dtype_error(op, std::string("compute-dtype tensors of different dtypes (") + dtype_name(dt) + " and " +
                              dtype_name(p.dtype) + ")");
    }
  }
  act_dtype_merge(op, dt, found, rest...);
}

// The one compute dtype of an op's Act/CAct tensors (fp32 if all are null).
template <typename... P>
DType act_dtype(const char* op, const P&... ptrs) {
  DType dt = DType::f32;
  bool found = false;
  act_dtype_merge(op, dt, found, ptrs...);
  if (dt != DType::f32 && dt != DType::bf16 && dt != DType::f16)
    act_dtype_error(op, std::string("a compute-dtype tensor of dtype ") + dtype_name(dt) +
                            " (must be fp32, bf16 or fp16)");
  return dt;
}

// f(T{}) for the storage type T of dtype (fp32, bf16, fp16).
template <typename F>
void dispatch_act(const char* op, DType dt, F&& f) {
  switch (dt) {
    case DType::f32: f(float{}); return;
    case DType::bf16: f(__nv_bfloat16{}); return;
    case DType::f16: f(__half{}); return;
    default: act_dtype_error(op, std::string("no ") + dtype_name(dt) + " form");
  }
}

// A typed pointer as the storage type the launcher dispatched to (the dtype was checked by act_dtype).
template <typename T>
const T* act(ConstTypedPtr p) {
  return static_cast<const T*>(p.data);
}
template <typename T>
T* act_mut(TypedPtr p) {
  return static_cast<T*>(p.data);
}

}  // namespace loom::cuda
