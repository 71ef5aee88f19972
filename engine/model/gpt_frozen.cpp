// The model's frozen base (LoRA) and where each tensor's weights and gradients are found: the
// trainable ones in their unit's buffers, the frozen ones dense in the compute dtype or, with
// QLoRA, quantized and dequantized one block at a time. Split from gpt.cpp, which is the passes.
#include <algorithm>
#include <stdexcept>
#include <string>
#include <unordered_map>

#include "engine/model/gpt.hpp"
#include "kernels/quantize.hpp"

namespace loom {

namespace {
QuantKind quant_kind(const LoraSpec& l) { return l.quantize == 1 ? QuantKind::Int8 : QuantKind::NF4; }

// QLoRA quantizes the blocks' four linear weights; everything else frozen stays dense.
bool quantized_weight(const LoraSpec& l, const std::string& name) {
  if (l.quantize == 0) return false;
  for (const char* w : {".attn.qkv.weight", ".attn.proj.weight", ".mlp.fc.weight", ".mlp.proj.weight"}) {
    const size_t n = std::char_traits<char>::length(w);
    if (name.size() > n && name.compare(name.size() - n, n, w) == 0) return true;
  }
  return false;
}
}  // namespace

size_t gpt_frozen_bytes(const ParamTable& frozen, const LoraSpec& l, size_t act) {
  size_t bytes = 0, dense = 0;
  std::unordered_map<int, size_t> per_layer;  // quantized elements of each block
  for (const ParamInfo& p : frozen.params()) {
    if (!quantized_weight(l, p.name)) {
      dense += p.numel;
      continue;
    }
    bytes += quantized_bytes(quant_kind(l), p.numel) + p.numel / size_t(l.quant_block) * 4;
    per_layer[p.layer] += p.numel;
  }
  size_t widest = 0;  // the dequantization scratch holds the widest block's weights
  for (const auto& [layer, n] : per_layer) widest = std::max(widest, n);
  return bytes + (dense + widest) * act;
}

FrozenLoadElems gpt_frozen_load_elems(const ParamTable& frozen, const LoraSpec& l, bool compute16) {
  FrozenLoadElems e;
  size_t widest_dense = 0;
  for (const ParamInfo& p : frozen.params()) {
    e.host = std::max(e.host, p.numel);
    if (!quantized_weight(l, p.name)) widest_dense = std::max(widest_dense, p.numel);
  }
  if (compute16) e.backend = widest_dense;
  return e;
}

// The frozen base: dense in the compute dtype, or (QLoRA) the blocks' linear weights quantized.
void Gpt::alloc_frozen() {
  const LoraSpec& l = shape_.lora;
  size_t dense = 0;
  std::unordered_map<int, size_t> per_layer;  // quantized elements of each block
  for (const ParamInfo& p : frozen_table_.params()) {
    if (!quantized_weight(l, p.name)) {
      frozen_dense_[p.name] = dense;
      dense += p.numel;
      continue;
    }
    if (p.numel % size_t(l.quant_block) != 0)
      throw std::invalid_argument(p.name + ": " + std::to_string(p.numel) + " elements on this rank are not a multiple of "
                                  "lora.quant_block = " + std::to_string(l.quant_block));
    const QuantKind kind = quant_kind(l);
    QuantizedTensor q;
    q.n = p.numel;
    const size_t code_bytes = quantized_bytes(kind, p.numel), scale_bytes = p.numel / size_t(l.quant_block) * 4;
    q.codes = static_cast<uint8_t*>(alloc_bytes(code_bytes, false));
    q.scales = static_cast<float*>(alloc_bytes(scale_bytes, false));
    frozen_bytes_ += code_bytes + scale_bytes;
    frozen_quant_[p.name] = q;
    per_layer[p.layer] += p.numel;
  }
  if (dense) frozen_ = TypedPtr(alloc_bytes(dense * dtype_size(compute_), false), compute_);
  frozen_bytes_ += dense * dtype_size(compute_);
  size_t widest = 0;
  for (const auto& [layer, n] : per_layer) widest = std::max(widest, n);
  if (widest) {
    dequant_scratch_ = TypedPtr(alloc_bytes(widest * dtype_size(compute_), false), compute_);
    frozen_bytes_ += widest * dtype_size(compute_);
  }
  // `loom plan` predicts this from the same function: the two must not drift apart.
  if (frozen_bytes_ != gpt_frozen_bytes(frozen_table_, l, dtype_size(compute_)))
    throw std::logic_error("Gpt: the frozen base took " + std::to_string(frozen_bytes_) + " bytes, gpt_frozen_bytes says " +
                           std::to_string(gpt_frozen_bytes(frozen_table_, l, dtype_size(compute_))));
}

// Each tensor goes straight to its place, with no copy of the whole base on the host or the
// device (it may be most of the memory a QLoRA run has): fp32 uploaded in place, 16-bit through
// one staging buffer as large as the largest dense tensor, quantized ones a tensor at a time.
void Gpt::set_frozen(const float* host) {
  set_frozen([host](const ParamInfo& p, float* dst) { std::copy(host + p.offset, host + p.offset + p.numel, dst); });
}

void Gpt::set_frozen(const std::function<void(const ParamInfo&, float*)>& fill) {
  std::vector<uint8_t> codes;
  std::vector<float> scales;
  const LoraSpec& l = shape_.lora;
  const QuantKind kind = quant_kind(l);
  const FrozenLoadElems load = gpt_frozen_load_elems(frozen_table_, l, compute_ != DType::f32);
  std::vector<float> host(load.host);
  float* staging = load.backend ? be_.alloc(load.backend) : nullptr;
  for (const ParamInfo& p : frozen_table_.params()) {
    fill(p, host.data());
    const float* src = host.data();
    if (auto q = frozen_quant_.find(p.name); q != frozen_quant_.end()) {
      codes.resize(quantized_bytes(kind, p.numel));
      scales.resize(p.numel / size_t(l.quant_block));
      quantize_blockwise(kind, src, p.numel, l.quant_block, codes.data(), scales.data());
      be_.copy_from_host(q->second.codes, codes.data(), codes.size());
      be_.upload(q->second.scales, scales.data(), scales.size());
      continue;
    }
    const TypedPtr dst = frozen_ + frozen_dense_.at(p.name);
    if (staging) {  // copies are ordered with the conversion before the buffer is reused
      be_.upload(staging, src, p.numel);
      be_.convert(dst, ConstTypedPtr(staging), p.numel);
    } else {
      be_.upload(static_cast<float*>(dst.data), src, p.numel);
    }
  }
  if (staging) be_.release(staging);
  dequantized_layer_ = -1;
}

void Gpt::dequantize_block(int layer) {
  if (frozen_quant_.empty() || dequantized_layer_ == layer) return;
  const std::string h = "h." + std::to_string(layer) + ".";
  const LoraSpec& l = shape_.lora;
  size_t at = 0;
  dequantized_.clear();
  for (const char* w : {"attn.qkv.weight", "attn.proj.weight", "mlp.fc.weight", "mlp.proj.weight"}) {
    const auto q = frozen_quant_.find(h + w);
    if (q == frozen_quant_.end()) continue;
    const TypedPtr dst = dequant_scratch_ + at;
    be_.dequantize(dst, q->second.codes, q->second.scales, q->second.n, l.quant_block, int(quant_kind(l)));
    dequantized_[h + w] = dst;
    at += q->second.n;
  }
  dequantized_layer_ = layer;
}

uint64_t Gpt::block_dropout_seed(const Slot& s, int layer) const {
  if (!s.dropping) return 0;
  const uint64_t seed = s.dropout_seed ^ (0x9E3779B97F4A7C15ull * uint64_t(layer + 1));
  return seed ? seed : 1;  // 0 means "no dropout"
}

TypedPtr Gpt::frozen_ptr(const std::string& name) const {
  if (auto d = frozen_dense_.find(name); d != frozen_dense_.end()) return frozen_ + d->second;
  if (auto q = dequantized_.find(name); q != dequantized_.end()) return q->second;
  if (frozen_quant_.count(name)) throw std::logic_error("Gpt: " + name + " used before its block was dequantized");
  return TypedPtr();
}

TypedPtr Gpt::p(int u, const std::string& name) const {
  if (const ParamInfo* t = table_.find_if_held(name)) return wbase_[size_t(u)] + (t->offset - units_[size_t(u)].begin);
  if (TypedPtr f = frozen_ptr(name)) return f;
  throw std::out_of_range("no parameter named '" + name + "'");
}
float* Gpt::g(int u, const std::string& name) const {
  const ParamInfo* t = table_.find_if_held(name);
  return t ? gbase_[size_t(u)] + (t->offset - units_[size_t(u)].begin) : nullptr;
}
BlockWeights Gpt::block_weights(int u, TypedPtr w, int layer) const {
  const size_t base = units_[size_t(u)].begin;
  return BlockWeights::lookup(layer, [&](const std::string& name) {
    if (const ParamInfo* t = table_.find_if_held(name)) return w + (t->offset - base);
    return frozen_ptr(name);
  });
}
BlockGrads Gpt::block_grads(int u, float* dw, int layer) const {
  const size_t base = units_[size_t(u)].begin;
  return BlockGrads::lookup(layer, [&](const std::string& name) -> float* {
    const ParamInfo* t = table_.find_if_held(name);
    return t && dw ? dw + (t->offset - base) : nullptr;
  });
}

}  // namespace loom
