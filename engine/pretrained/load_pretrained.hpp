#pragma once
// Pretrained weights into a model of any layout: each rank takes its slice of every global
// tensor it holds, by the same global coordinates (ParamInfo::global_index) that initialisation
// and checkpoint loading use, so tp/pp/dp/zero layouts all start from the same global weights.
#include "engine/model/gpt_shape.hpp"
#include "engine/model/param_table.hpp"
#include "engine/pretrained/pretrained_source.hpp"

namespace loom {

// Overwrites every tensor of `table` but LoRA adapters in `host` (table.total() floats, the model's flat layout)
// with its slice of `src`'s tensor; wte's padding rows become zero. Throws std::runtime_error
// naming the source and tensor on a missing tensor or a wrong shape.
void load_pretrained(const ParamTable& table, const GptShape& shape, const PretrainedSource& src, float* host);
// One tensor of it into `dst` (p.numel floats), adapters included (the caller skips them).
void load_pretrained_param(const ParamInfo& p, const GptShape& shape, const PretrainedSource& src, float* dst);
// The host bytes load_pretrained_param holds besides `dst` for the widest tensor of `table`: the
// source's copy of the whole global tensor, in fp32 (a tp slice is cut from it). For `loom plan`.
size_t pretrained_read_bytes(const ParamTable& table);

}  // namespace loom
