// cpu_scratch_bytes (kernels/backend.hpp): the asks of the ops a model runs, each written next to
// its op (scratch_need.hpp), summed over the slots and threads.
#include <stdexcept>

#include "kernels/backend.hpp"
#include "kernels/cpu/scratch_need.hpp"

namespace loom {
namespace {

template <typename T>
size_t bytes_for(const CpuScratchShapes& s) {
  cpu::ScratchNeed need;
  for (const CpuLinearShape& l : s.linears) cpu::matmul_scratch<T>(need, s.rows, l.in, l.out, l.bias, l.dinp);
  if (s.heads > 0) cpu::attention_scratch<T>(need, s.batch, s.seq, s.attention_width, s.heads);
  if (s.width > 0) {
    cpu::layernorm_scratch<T>(need, s.rows, s.width);
    cpu::encoder_scratch<T>(need, s.rows, s.width);
  }
  if (s.logits_row > 0) cpu::crossentropy_scratch<T>(need, s.rows, s.logits_row);
  return need.bytes(s.threads);
}

}  // namespace

size_t cpu_scratch_bytes(const CpuScratchShapes& s) {
  switch (s.compute) {
    case DType::f32: return 0;
    case DType::bf16: return bytes_for<bf16>(s);
    case DType::f16: return bytes_for<fp16>(s);
    default: throw std::invalid_argument("cpu_scratch_bytes: compute dtype must be f32, bf16 or f16");
  }
}

size_t cpu_scratch_held_bytes() { return cpu::fp32_scratch_held_bytes(); }

}  // namespace loom
