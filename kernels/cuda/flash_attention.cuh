#pragma once
// The tiled (flash) causal attention kernels that attention.cu hands a call to when they take it:
// head size 64 or 128, every compute dtype, and enough shared memory on the device. Same
// contract as attention_forward/attention_backward (kernels/backend_ops.def); `lse` is the
// (B, NH, T) fp32 log-sum-exp that attention.cu's row kernels save too, so either side's
// forward pairs with either side's backward.
//   flash_attention_fma.cu  fp32 tiles through shared memory, FMA: fp32 (and any dtype, loaded
//                           to float, where the tensor cores are not used); the entry points
//   flash_attention_mma.cu  bf16/fp16 on tensor cores (mma.sync m16n8k16, sm_80+)
#include <cuda_runtime.h>

#include <cstddef>

#include "kernels/dtype.hpp"

namespace loom::cuda {

// Whether the tiled kernels run head size hs (C / NH) in dtype dt on the current device.
bool flash_attention_supported(int hs, DType dt);

// out (B,T,C), lse (B,NH,T) from qkv (B,T,3C). Call only where flash_attention_supported.
void flash_attention_forward(TypedPtr out, float* lse, ConstTypedPtr qkv, int B, int T, int C, int NH,
                             cudaStream_t stream);
// dqkv (B,T,3C), overwritten; delta: B*NH*T floats of scratch (D = rowsum(dO * O)).
void flash_attention_backward(TypedPtr dqkv, ConstTypedPtr dout, ConstTypedPtr qkv, ConstTypedPtr out,
                              const float* lse, float* delta, int B, int T, int C, int NH, cudaStream_t stream);

// Whether the tensor-core kernels take dtype dt on the current device (bf16/fp16, sm_80+, not
// LOOM_CUDA_ATTENTION=fma), and the most dynamic shared memory they need at head size hs (64 or
// 128): flash_attention_supported asks for what the kernels that will run need, so a 99 KiB
// device (sm_86/89) runs head size 128 in 16 bits on them, where the fp32 tiles do not fit.
bool flash_attention_mma_takes(DType dt);
size_t flash_attention_mma_smem(int hs);

// The tensor-core kernels (flash_attention_mma.cu), called by the two above: false, having done
// nothing, unless the dtype is bf16/fp16 on sm_80+ and LOOM_CUDA_ATTENTION is not "fma".
bool flash_attention_forward_mma(TypedPtr out, float* lse, ConstTypedPtr qkv, int B, int T, int C, int NH,
                                 cudaStream_t stream);
// delta already computed.
bool flash_attention_backward_mma(TypedPtr dqkv, ConstTypedPtr dout, ConstTypedPtr qkv, const float* lse,
                                  const float* delta, int B, int T, int C, int NH, cudaStream_t stream);

}  // namespace loom::cuda
