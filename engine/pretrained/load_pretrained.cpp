#include "engine/pretrained/load_pretrained.hpp"

#include <algorithm>
#include <cstddef>

namespace loom {

void load_pretrained_param(const ParamInfo& p, const GptShape& shape, const PretrainedSource& src, float* dst) {
  GlobalTensor want{p.name, p.global_shape};
  if (p.name == "wte") want.shape[0] = shape.vocab;  // the padding rows are Loom's own
  const std::vector<float> global = src.tensor(want);
  const int64_t stored = int64_t(global.size());
#pragma omp parallel for schedule(static)
  for (size_t i = 0; i < p.numel; ++i) {
    const int64_t g = p.global_index(i);
    dst[i] = g < stored ? global[size_t(g)] : 0.0f;
  }
}

size_t pretrained_read_bytes(const ParamTable& table) {
  size_t widest = 0;
  for (const ParamInfo& p : table.params()) {
    size_t n = 1;
    for (int64_t d : p.global_shape) n *= size_t(d);
    widest = std::max(widest, n);
  }
  return widest * sizeof(float);
}

void load_pretrained(const ParamTable& table, const GptShape& shape, const PretrainedSource& src, float* host) {
  for (const ParamInfo& p : table.params()) {
    if (is_lora_adapter(p.name)) continue;  // adapters are the fine-tuning's own, from their init
    load_pretrained_param(p, shape, src, host + p.offset);
  }
}

}  // namespace loom
