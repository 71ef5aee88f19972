#pragma once
// Blockwise quantization of frozen weights on the host (QLoRA's storage of the base model:
// Dettmers et al. 2023, "QLoRA: Efficient Finetuning of Quantized LLMs"). The weights are cut
// into blocks of `block` consecutive elements; each block keeps one fp32 scale and one code per
// element. The backend's `dequantize` op (kernels/backend_ops.def) turns codes and scales back
// into the compute dtype just before the matmul that reads them.
//
//   Int8  scale = absmax / 127 (fp32), code = round(w / scale) in [-127, 127] (half away from
//         zero), stored as the int8's byte (two's complement) in a uint8_t: n bytes for n
//         elements. Decoded: code * scale.
//   NF4   scale = absmax (fp32), code = the index of the NF4 level nearest to w / absmax (ties
//         to the lower level), two codes per byte: element 2i in the low nibble, 2i+1 in the
//         high nibble (bitsandbytes packs the other way round: its bytes are not these): n / 2
//         bytes. Decoded: kNF4Levels[code] * scale.
//
// An all-zero block gets scale 0 (and the code of level 0): it decodes to zeros. The division
// w / scale and the search for the nearest level are done in double, so each element's error
// after decoding is at most half the largest gap between adjacent levels times the block's
// scale (int8: scale / 2; NF4: max_gap / 2 * absmax), plus the fp32 rounding of the decoded
// product.
//
// Plain C++ with no dependency (OpenMP over blocks where the build has it), so the CUDA
// backend's dequantize reads the same table (kNF4Levels) from this header.
#include <cstddef>
#include <cstdint>

namespace loom {

// The values are the `kind` argument of Backend::dequantize.
enum class QuantKind : int { Int8 = 0, NF4 = 1 };

// "int8" | "nf4" ("?" for a value outside the enum).
const char* quant_kind_name(QuantKind kind);

// The 16 NF4 levels, in code order (code 7 is 0, code 15 is 1): bitsandbytes' table
// (bitsandbytes/functional.py get_4bit_type("nf4"), csrc/kernels.cu nf4_dequantization_lut),
// the quantiles of N(0, 1) normalised to [-1, 1] with an exact zero.
inline constexpr float kNF4Levels[16] = {
    -1.0f,
    -0.6961928009986877f,
    -0.5250730514526367f,
    -0.39491748809814453f,
    -0.28444138169288635f,
    -0.18477343022823334f,
    -0.09105003625154495f,
    0.0f,
    0.07958029955625534f,
    0.16093020141124725f,
    0.24611230194568634f,
    0.33791524171829224f,
    0.44070982933044434f,
    0.5626170039176941f,
    0.7229568362236023f,
    1.0f,
};
inline constexpr uint8_t kNF4Zero = 7;  // the code of level 0

// Bytes of codes for n elements: int8 n, NF4 n / 2 (rounded up for an odd n, which the
// quantizer never makes: its n is a multiple of an even block).
size_t quantized_bytes(QuantKind kind, size_t n);

// Quantizes w[0, n) into codes (quantized_bytes(kind, n) bytes) and scales (n / block floats).
// block must be even and positive, n a multiple of it (n = 0: nothing to do). Throws
// std::invalid_argument, saying what is wrong, for a bad kind, block or n, a null pointer, or
// a non-finite weight (then codes and scales are left partly written).
void quantize_blockwise(QuantKind kind, const float* w, size_t n, int block, uint8_t* codes, float* scales);

}  // namespace loom
