#pragma once
// Stored little-endian floats in a memory-mapped file, read as fp32: the one copy loop of the
// pretrained readers (safetensors, llm.c). It goes in pieces of kMappedFloatPiece elements and
// gives each piece's pages back once copied (MappedFile::drop_pages), so the file's copy of a
// large tensor (GPT-2's token embedding: 154 MB) is never resident beside the result whole.
#include <cstddef>

#include "engine/data/mapped_file.hpp"

namespace loom {

enum class StoredFloat { F32, BF16, F16 };

inline constexpr size_t kMappedFloatPiece = size_t(1) << 20;  // elements: 4 MiB of fp32

inline size_t stored_float_bytes(StoredFloat kind) { return kind == StoredFloat::F32 ? 4 : 2; }

// `count` values stored from byte `at` of `f` into `out`. The caller checks the range.
void read_mapped_floats(const MappedFile& f, size_t at, size_t count, StoredFloat kind, float* out);

}  // namespace loom
