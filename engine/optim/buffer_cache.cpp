#include "engine/optim/buffer_cache.hpp"

#include <algorithm>
#include <stdexcept>

namespace loom {

BufferCache::~BufferCache() {
  for (auto& [p, bytes] : size_of_) be_.release(p);
}

void* BufferCache::take(size_t bytes) {
  bytes = std::max<size_t>(bytes, 1);
  void* p = nullptr;
  auto it = free_.find(bytes);
  if (it != free_.end() && !it->second.empty()) {
    p = it->second.back();
    it->second.pop_back();
  } else {
    p = be_.alloc_bytes(bytes);
    size_of_[p] = bytes;
    held_ += bytes;
    peak_ = std::max(peak_, held_);
  }
  live_ += bytes;
  return p;
}

void BufferCache::give(void* p) {
  if (!p) return;
  auto it = size_of_.find(p);
  if (it == size_of_.end()) throw std::logic_error("BufferCache::give: a buffer this cache did not hand out");
  live_ -= it->second;
  free_[it->second].push_back(p);
}

}  // namespace loom
