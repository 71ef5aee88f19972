// Elementwise ops over flat buffers: zero, the residual add, scale and dtype conversion, and the
// 16-bit paths' bulk conversions and fp32 scratch (convert_simd.hpp). One OpenMP loop each (each
// element is one exact IEEE operation, rounded once when stored, so the result does not depend on
// the vectorisation or the thread count).
#include <algorithm>
#include <atomic>
#include <memory>
#include <new>
#include <stdexcept>
#include <type_traits>
#include <vector>

#include "kernels/cpu/convert_simd.hpp"
#include "kernels/cpu/cpu_ops.hpp"

namespace loom::cpu {
namespace {
constexpr size_t kChunk = 1 << 12;  // elements per task of the 16-bit loops (16 KB of fp32 scratch)
}  // namespace

template <typename T>
void widen_parallel(const T* src, acc_t<T>* dst, size_t n) {
  const size_t nchunks = (n + kChunk - 1) / kChunk;
#pragma omp parallel for schedule(static)
  for (size_t c = 0; c < nchunks; ++c) widen(src + c * kChunk, dst + c * kChunk, std::min(kChunk, n - c * kChunk));
}
template <typename T>
void narrow_parallel(const acc_t<T>* src, T* dst, size_t n) {
  const size_t nchunks = (n + kChunk - 1) / kChunk;
#pragma omp parallel for schedule(static)
  for (size_t c = 0; c < nchunks; ++c) narrow(src + c * kChunk, dst + c * kChunk, std::min(kChunk, n - c * kChunk));
}
template void widen_parallel<bf16>(const bf16*, float*, size_t);
template void widen_parallel<fp16>(const fp16*, float*, size_t);
template void narrow_parallel<bf16>(const float*, bf16*, size_t);
template void narrow_parallel<fp16>(const float*, fp16*, size_t);

namespace {
// Every scratch buffer starts on a 64-byte boundary. Eigen's vectorised reductions (a softmax
// row's max and sum) peel elements up to the first aligned packet, so where a buffer starts
// changes how its sum is grouped: with malloc's 16-byte alignment, which varied from run to run
// with the heap's history (threads allocate concurrently), fp16 and widened bf16 attention
// summed differently in the last bits from one run to the next.
constexpr std::align_val_t kScratchAlign{64};
struct AlignedFree {
  void operator()(float* p) const { ::operator delete[](p, kScratchAlign); }
};
std::atomic<size_t> g_held_floats{0};  // over every thread's slots
struct ScratchBuf {
  std::unique_ptr<float[], AlignedFree> p;
  size_t n = 0;
  void reset(size_t want) {  // want 0: free
    p.reset(want ? static_cast<float*>(::operator new[](want * sizeof(float), kScratchAlign)) : nullptr);
    g_held_floats += want;
    g_held_floats -= n;
    n = want;
  }
  ~ScratchBuf() { g_held_floats -= n; }
};
ScratchBuf* scratch_slots() {
  thread_local ScratchBuf bufs[kFp32ScratchSlots];
  return bufs;
}
}  // namespace

void release_fp32_scratch() {
  for (int i = 0; i < kFp32ScratchSlots; ++i) scratch_slots()[i].reset(0);
}

size_t fp32_scratch_held_bytes() { return g_held_floats.load() * sizeof(float); }

float* fp32_scratch(int slot, size_t n) {
  if (slot < 0 || slot >= kFp32ScratchSlots) throw std::logic_error("fp32_scratch: slot out of range");
  ScratchBuf& b = scratch_slots()[slot];
  if (b.n < n) b.reset(n);
  return b.p.get();
}

template <typename T>
void zero(T* p, size_t n) {
#pragma omp parallel for schedule(static)
  for (size_t i = 0; i < n; ++i) p[i] = T{};  // +0 in every dtype
}

template <typename T>
void residual_forward(T* out, const T* a, const T* b, size_t n) {
  if constexpr (!is_16bit<T>) {
#pragma omp parallel for simd schedule(static)
    for (size_t i = 0; i < n; ++i) out[i] = a[i] + b[i];
  } else {
    // Widen a chunk of each input to fp32 on the stack, add, round once. out may alias a or b.
    const size_t nchunks = (n + kChunk - 1) / kChunk;
#pragma omp parallel for schedule(static)
    for (size_t c = 0; c < nchunks; ++c) {
      const size_t i0 = c * kChunk, len = std::min(kChunk, n - i0);
      alignas(64) float fa[kChunk], fb[kChunk];
      widen(a + i0, fa, len);
      widen(b + i0, fb, len);
      for (size_t i = 0; i < len; ++i) fa[i] += fb[i];
      narrow(fa, out + i0, len);
    }
  }
}

template <typename T>
void scale(acc_t<T>* x, size_t n, acc_t<T> s) {
#pragma omp parallel for simd schedule(static)
  for (size_t i = 0; i < n; ++i) x[i] *= s;
}

// Runs at any dtype pair (the template parameter is the dispatch's, dst's dtype): each element is
// widened to float (exact) and narrowed once to dst's type.
template <typename Real>
void convert(TypedPtr dst, ConstTypedPtr src, size_t n) {
  auto run = [&](auto* d, const auto* s) {
    using D = std::remove_pointer_t<decltype(d)>;
    using S = std::remove_const_t<std::remove_pointer_t<decltype(s)>>;
    if constexpr (std::is_same_v<D, float> && is_16bit<S>) {
      widen_parallel(s, d, n);
    } else if constexpr (is_16bit<D> && std::is_same_v<S, float>) {
      narrow_parallel(s, d, n);
    } else {
#pragma omp parallel for simd schedule(static)
      for (size_t i = 0; i < n; ++i) d[i] = D(static_cast<float>(s[i]));
    }
  };
  auto with_src = [&](auto* d) {
    switch (src.dtype) {
      case DType::f32: return run(d, src.as<float>());
      case DType::bf16: return run(d, src.as<bf16>());
      case DType::f16: return run(d, src.as<fp16>());
      default: throw std::logic_error("convert: source dtype must be fp32, bf16 or fp16");
    }
  };
  switch (dst.dtype) {
    case DType::f32: return with_src(dst.as<float>());
    case DType::bf16: return with_src(dst.as<bf16>());
    case DType::f16: return with_src(dst.as<fp16>());
    default: throw std::logic_error("convert: destination dtype must be fp32, bf16 or fp16");
  }
}

template <typename T>
void axpy(T* y, const T* x, acc_t<T> alpha, size_t n) {
  if constexpr (!is_16bit<T>) {
#pragma omp parallel for simd schedule(static)
    for (size_t i = 0; i < n; ++i) y[i] += alpha * x[i];
  } else {
    const size_t nchunks = (n + kChunk - 1) / kChunk;
#pragma omp parallel for schedule(static)
    for (size_t c = 0; c < nchunks; ++c) {
      const size_t i0 = c * kChunk, len = std::min(kChunk, n - i0);
      alignas(64) float fy[kChunk], fx[kChunk];
      widen(y + i0, fy, len);
      widen(x + i0, fx, len);
      for (size_t i = 0; i < len; ++i) fy[i] += alpha * fx[i];
      narrow(fy, y + i0, len);
    }
  }
}

#define LOOM_INSTANTIATE(T)                                 \
  template void convert<T>(TypedPtr, ConstTypedPtr, size_t); \
  template void zero<T>(T*, size_t);                         \
  template void residual_forward<T>(T*, const T*, const T*, size_t); \
  template void axpy<T>(T*, const T*, acc_t<T>, size_t);               \
  template void scale<T>(acc_t<T>*, size_t, acc_t<T>);
LOOM_CPU_FOR_EACH_TYPE(LOOM_INSTANTIATE)
#undef LOOM_INSTANTIATE

}  // namespace loom::cpu
