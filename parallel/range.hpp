#pragma once
// A half-open range [begin, end) of elements of a flat buffer (parameters, gradients, optimizer
// moments all share the model's flat layout). The one range type of Loom: gradient buckets,
// ZeRO ownership and checkpoint slices are all lists of these.
#include <cstddef>

namespace loom::parallel {

struct Range {
  size_t begin = 0, end = 0;
  size_t size() const { return end - begin; }
  bool operator==(const Range& o) const { return begin == o.begin && end == o.end; }
};

}  // namespace loom::parallel
