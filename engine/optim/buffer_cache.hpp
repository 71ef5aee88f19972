#pragma once
// Backend buffers taken and given back many times a step (ZeRO-3's gathered units, ZeRO-2/3's
// per-unit gradients and reduction staging), kept for reuse by exact size instead of being
// allocated and freed each time (cudaMalloc synchronises the device; on the CPU a large free
// returns pages the next malloc faults in again). A model's units come in few sizes (every block
// has the same), so exact-size reuse keeps the cache at the most buffers of each size ever live at
// once. Counts the bytes live and held, and their peak, for the memory report.
#include <cstddef>
#include <map>
#include <unordered_map>
#include <vector>

#include "kernels/backend.hpp"

namespace loom {

class BufferCache {
 public:
  explicit BufferCache(Backend& be) : be_(be) {}
  ~BufferCache();
  BufferCache(const BufferCache&) = delete;
  BufferCache& operator=(const BufferCache&) = delete;

  // A buffer of `bytes` (contents unspecified when reused): a free one of that size, or a new one.
  void* take(size_t bytes);
  void give(void* p);
  size_t live_bytes() const { return live_; }
  size_t held_bytes() const { return held_; }   // live + free, allocated from the backend
  size_t peak_bytes() const { return peak_; }   // the most held at once

 private:
  Backend& be_;
  std::map<size_t, std::vector<void*>> free_;
  std::unordered_map<void*, size_t> size_of_;
  size_t live_ = 0, held_ = 0, peak_ = 0;
};

}  // namespace loom
