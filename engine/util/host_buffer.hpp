#pragma once
// A large, uninitialised host array on 2 MiB boundaries, marked for transparent huge pages.
// Checkpoint snapshots and staging buffers are hundreds of MB touched once per save or load;
// with 4 KiB pages the first touch of each page is a fault (measured ~5 us each here: 0.8 s for
// 664 MB, more than reading the file from the page cache), with huge pages 512x fewer.
#include <sys/mman.h>

#include <cstddef>
#include <algorithm>
#include <cstdlib>
#include <new>

namespace loom {

template <class T>
class HostBuffer {
 public:
  HostBuffer() = default;
  explicit HostBuffer(size_t n) { resize(n); }
  ~HostBuffer() { std::free(data_); }
  HostBuffer(const HostBuffer&) = delete;
  HostBuffer& operator=(const HostBuffer&) = delete;

  // Keeps the allocation when it is big enough (contents are not preserved either way).
  void resize(size_t n) {
    if (n <= capacity_) {
      size_ = n;
      return;
    }
    std::free(data_);
    constexpr size_t kHuge = size_t(2) << 20;
    const size_t bytes = (std::max<size_t>(n, 1) * sizeof(T) + kHuge - 1) / kHuge * kHuge;
    data_ = static_cast<T*>(std::aligned_alloc(kHuge, bytes));
    if (!data_) throw std::bad_alloc();
#ifdef MADV_HUGEPAGE
    ::madvise(data_, bytes, MADV_HUGEPAGE);  // advice only: harmless where unsupported
#endif
    size_ = n;
    capacity_ = bytes / sizeof(T);
  }
  T* data() { return data_; }
  const T* data() const { return data_; }
  size_t size() const { return size_; }

 private:
  T* data_ = nullptr;
  size_t size_ = 0, capacity_ = 0;
};

}  // namespace loom
