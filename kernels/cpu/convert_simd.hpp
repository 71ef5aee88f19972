#pragma once
// Bulk conversions between a storage type T (float, double, bf16, fp16) and its arithmetic type
// acc_t<T>, for the CPU ops' 16-bit paths: widen() on load, narrow() on store (rounded once, to
// nearest even). Both give exactly the results of the scalar conversions in kernels/dtype.hpp
// (bf16::from_float, fp16::from_float), NaN apart: a NaN stays a NaN, its payload may differ.
//
// With AVX-512 (the build uses -march=native) 16 elements at a time:
//   bf16 -> f32  a 16-bit shift (exact);
//   f32 -> bf16  VCVTNEPS2BF16 (AVX512_BF16) where available; it flushes fp32 subnormal inputs
//                to zero, so lanes holding one are redone with the integer rounding of
//                bf16::from_float; without AVX512_BF16 that integer rounding for all lanes;
//   fp16 <-> f32 VCVTPH2PS / VCVTPS2PH (AVX512F) with round-to-nearest-even: IEEE conversions,
//                overflow to inf and subnormal halves as the scalar code.
// The tail (n % 16) and builds without AVX-512 use the scalar conversions.
// No OpenMP inside: callers parallelise over chunks.
#include <cstddef>
#include <cstring>
#include <type_traits>

#if defined(__AVX512F__)
#include <immintrin.h>
#endif

#include "kernels/dtype.hpp"

namespace loom::cpu {

template <typename T>
constexpr bool is_16bit = std::is_same_v<T, bf16> || std::is_same_v<T, fp16>;

#if defined(__AVX512F__)
namespace simd {
// 16 floats -> 16 bf16, exactly bf16::from_float (nearest even; NaN -> quiet NaN).
inline __m256i narrow_bf16_int(__m512 v) {
  const __m512i u = _mm512_castps_si512(v);
  const __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(1));
  __m512i r = _mm512_srli_epi32(_mm512_add_epi32(_mm512_add_epi32(u, _mm512_set1_epi32(0x7fff)), lsb), 16);
  const __mmask16 nan = _mm512_cmpgt_epu32_mask(_mm512_and_si512(u, _mm512_set1_epi32(0x7fffffff)),
                                                _mm512_set1_epi32(0x7f800000));
  r = _mm512_mask_mov_epi32(r, nan, _mm512_or_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(0x40)));
  return _mm512_cvtepi32_epi16(r);
}
inline __m256i narrow_bf16(__m512 v) {
#if defined(__AVX512BF16__)
  const __m512i u = _mm512_castps_si512(v);
  // Zero exponent and non-zero mantissa: a subnormal, which VCVTNEPS2BF16 would flush to zero.
  const __mmask16 sub = _mm512_testn_epi32_mask(u, _mm512_set1_epi32(0x7f800000)) &
                        _mm512_test_epi32_mask(u, _mm512_set1_epi32(0x007fffff));
  const __m256i r = (__m256i)_mm512_cvtneps_pbh(v);
  return sub ? _mm256_mask_mov_epi16(r, sub, narrow_bf16_int(v)) : r;
#else
  return narrow_bf16_int(v);
#endif
}
inline __m512 widen_bf16(__m256i h) { return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16)); }
}  // namespace simd
#endif

// dst[0, n) = acc_t<T>(src[i]): exact.
template <typename T>
inline void widen(const T* src, acc_t<T>* dst, size_t n) {
  size_t i = 0;
  if constexpr (!is_16bit<T>) {
    std::memcpy(dst, src, n * sizeof(T));
    return;
  }
#if defined(__AVX512F__)
  if constexpr (std::is_same_v<T, bf16>) {
    for (; i + 16 <= n; i += 16)
      _mm512_storeu_ps(dst + i, simd::widen_bf16(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(src + i))));
  } else if constexpr (std::is_same_v<T, fp16>) {
    for (; i + 16 <= n; i += 16)
      _mm512_storeu_ps(dst + i, _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(src + i))));
  }
#endif
  for (; i < n; ++i) dst[i] = static_cast<float>(src[i]);
}

// dst[0, n) = T(src[i]): one rounding, nearest even.
template <typename T>
inline void narrow(const acc_t<T>* src, T* dst, size_t n) {
  size_t i = 0;
  if constexpr (!is_16bit<T>) {
    std::memcpy(dst, src, n * sizeof(T));
    return;
  }
#if defined(__AVX512F__)
  if constexpr (std::is_same_v<T, bf16>) {
    for (; i + 16 <= n; i += 16)
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + i), simd::narrow_bf16(_mm512_loadu_ps(src + i)));
  } else if constexpr (std::is_same_v<T, fp16>) {
    for (; i + 16 <= n; i += 16)
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + i),
                          _mm512_cvtps_ph(_mm512_loadu_ps(src + i), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
  }
#endif
  for (; i < n; ++i) dst[i] = T(src[i]);
}

// widen / narrow over [0, n) in parallel chunks (OpenMP; call from outside a parallel region).
template <typename T>
void widen_parallel(const T* src, acc_t<T>* dst, size_t n);
template <typename T>
void narrow_parallel(const acc_t<T>* src, T* dst, size_t n);

// x[0, n) as acc_t<T>: x itself for float and double, else widened into fp32_scratch(slot).
template <typename T>
const acc_t<T>* widened(const T* x, size_t n, int slot);

constexpr int kFp32ScratchSlots = 8;

// A per-thread float buffer of at least n elements, reused from call to call (the 16-bit paths'
// fp32 scratch). `slot` picks one of a few independent buffers; contents are not preserved
// between ops.
float* fp32_scratch(int slot, size_t n);
// Frees this thread's scratch buffers: after a one-off op much larger than the model's (the
// start-up gemm measurement), so that they do not stay at its size for the rest of the run.
void release_fp32_scratch();
// Bytes the fp32_scratch buffers of every thread hold now (what the slots grew to; loom plan's
// CPU workspace is checked against it).
size_t fp32_scratch_held_bytes();

template <typename T>
const acc_t<T>* widened(const T* x, size_t n, int slot) {
  if constexpr (!is_16bit<T>) {
    return x;
  } else {
    float* buf = fp32_scratch(slot, n);
    widen(x, buf, n);
    return buf;
  }
}

}  // namespace loom::cpu
