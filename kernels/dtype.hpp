#pragma once
// Element types of the buffers the backends and the communicators see, and typed pointers that
// carry their element type with them (TypedPtr / ConstTypedPtr), so an interface can take "a
// buffer of the run's compute dtype" and check at run time that it got one.
//
// bf16 and fp16 are storage types only: 16 bits, converted to float to compute. Conversions
// from float round to nearest, ties to even, as PyTorch, oneDNN and CUDA's __float2bfloat16 do;
// NaN stays NaN and values beyond the format's range become +-inf.
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <stdexcept>
#include <string>

namespace loom {

enum class DType : uint8_t { f32, bf16, f16, i32 };

constexpr size_t dtype_size(DType t) { return t == DType::bf16 || t == DType::f16 ? 2 : 4; }
// "fp32" | "bf16" | "fp16" | "int32": the names recipes and logs use.
inline const char* dtype_name(DType t) {
  switch (t) {
    case DType::f32: return "fp32";
    case DType::bf16: return "bf16";
    case DType::f16: return "fp16";
    case DType::i32: return "int32";
  }
  return "?";
}

namespace dtype_bits {
inline uint32_t float_bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}
inline float bits_float(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
}  // namespace dtype_bits

// bfloat16: the top 16 bits of an IEEE float (8 exponent bits, 7 mantissa bits).
struct bf16 {
  uint16_t bits = 0;
  bf16() = default;
  explicit bf16(float f) : bits(from_float(f)) {}
  explicit bf16(double d) : bf16(static_cast<float>(d)) {}
  operator float() const { return dtype_bits::bits_float(uint32_t(bits) << 16); }
  static bf16 from_bits(uint16_t b) {
    bf16 x;
    x.bits = b;
    return x;
  }
  static uint16_t from_float(float f) {
    const uint32_t u = dtype_bits::float_bits(f);
    if ((u & 0x7fffffffu) > 0x7f800000u) return uint16_t((u >> 16) | 0x40);  // NaN: keep it quiet NaN
    return uint16_t((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);                 // nearest, ties to even
  }
};

// IEEE half: 5 exponent bits, 10 mantissa bits, largest finite 65504.
struct fp16 {
  uint16_t bits = 0;
  fp16() = default;
  explicit fp16(float f) : bits(from_float(f)) {}
  explicit fp16(double d) : fp16(static_cast<float>(d)) {}
  operator float() const { return to_float(bits); }

  static uint16_t from_float(float f) {
    const uint32_t u = dtype_bits::float_bits(f);
    const uint32_t sign = (u >> 16) & 0x8000u;
    const uint32_t a = u & 0x7fffffffu;
    if (a > 0x7f800000u) return uint16_t(sign | 0x7e00u);  // NaN
    if (a >= 0x477ff000u) return uint16_t(sign | 0x7c00u);  // rounds past 65504: inf
    if (a < 0x38800000u) {                                  // below 2^-14: subnormal half (or 0)
      // Scale into the subnormal range by adding 0.5 (exponent -1): the float adder rounds to
      // nearest even at the half's last subnormal bit.
      const float r = dtype_bits::bits_float(a) + 0.5f;
      return uint16_t(sign | (dtype_bits::float_bits(r) - 0x3f000000u));
    }
    // Normal: rebias the exponent (127 -> 15) and round 23 mantissa bits to 10.
    const uint32_t m = a + ((15u - 127u) << 23) + 0xfffu + ((a >> 13) & 1u);
    return uint16_t(sign | (m >> 13));
  }
  static float to_float(uint16_t h) {
    const uint32_t sign = uint32_t(h & 0x8000u) << 16;
    const uint32_t e = (h >> 10) & 0x1fu, m = h & 0x3ffu;
    if (e == 0x1f) return dtype_bits::bits_float(sign | 0x7f800000u | (m << 13));  // inf, NaN
    if (e == 0) {  // subnormal or zero: m * 2^-24
      const float v = float(m) * 5.9604644775390625e-8f;
      return sign ? -v : v;
    }
    return dtype_bits::bits_float(sign | ((e + 112u) << 23) | (m << 13));
  }
};

template <typename T>
struct dtype_of_t;
template <>
struct dtype_of_t<float> {
  static constexpr DType value = DType::f32;
};
template <>
struct dtype_of_t<bf16> {
  static constexpr DType value = DType::bf16;
};
template <>
struct dtype_of_t<fp16> {
  static constexpr DType value = DType::f16;
};
template <>
struct dtype_of_t<int32_t> {
  static constexpr DType value = DType::i32;
};
template <typename T>
constexpr DType dtype_of = dtype_of_t<T>::value;

// The type arithmetic on T accumulates in: float for the 16-bit types, T otherwise (the CPU
// reference's double instantiation, used by the finite-difference tests, stays double).
template <typename T>
struct acc_of {
  using type = T;
};
template <>
struct acc_of<bf16> {
  using type = float;
};
template <>
struct acc_of<fp16> {
  using type = float;
};
template <typename T>
using acc_t = typename acc_of<T>::type;

[[noreturn]] inline void dtype_mismatch(DType got, DType want) {
  throw std::logic_error(std::string("buffer of dtype ") + dtype_name(got) + " where " + dtype_name(want) +
                         " was expected");
}

// A pointer to backend (or host) memory with the element type of what it points at. Converts
// implicitly from a pointer of a known element type, so fp32 code passes float* unchanged.
struct TypedPtr {
  void* data = nullptr;
  DType dtype = DType::f32;
  TypedPtr() = default;
  TypedPtr(void* p, DType t) : data(p), dtype(t) {}
  TypedPtr(std::nullptr_t) {}
  TypedPtr(float* p) : data(p), dtype(DType::f32) {}
  TypedPtr(bf16* p) : data(p), dtype(DType::bf16) {}
  TypedPtr(fp16* p) : data(p), dtype(DType::f16) {}
  TypedPtr(int32_t* p) : data(p), dtype(DType::i32) {}
  // The pointer as T*; throws (a programming error) if the element type is not T.
  template <typename T>
  T* as() const {
    if (dtype_of<T> != dtype && data) dtype_mismatch(dtype, dtype_of<T>);
    return static_cast<T*>(data);
  }
  // `count` elements further on.
  TypedPtr operator+(size_t count) const { return {static_cast<char*>(data) + count * dtype_size(dtype), dtype}; }
  explicit operator bool() const { return data != nullptr; }
};

struct ConstTypedPtr {
  const void* data = nullptr;
  DType dtype = DType::f32;
  ConstTypedPtr() = default;
  ConstTypedPtr(const void* p, DType t) : data(p), dtype(t) {}
  ConstTypedPtr(std::nullptr_t) {}
  ConstTypedPtr(TypedPtr p) : data(p.data), dtype(p.dtype) {}
  ConstTypedPtr(const float* p) : data(p), dtype(DType::f32) {}
  ConstTypedPtr(const bf16* p) : data(p), dtype(DType::bf16) {}
  ConstTypedPtr(const fp16* p) : data(p), dtype(DType::f16) {}
  ConstTypedPtr(const int32_t* p) : data(p), dtype(DType::i32) {}
  template <typename T>
  const T* as() const {
    if (dtype_of<T> != dtype && data) dtype_mismatch(dtype, dtype_of<T>);
    return static_cast<const T*>(data);
  }
  ConstTypedPtr operator+(size_t count) const {
    return {static_cast<const char*>(data) + count * dtype_size(dtype), dtype};
  }
  explicit operator bool() const { return data != nullptr; }
};

}  // namespace loom
