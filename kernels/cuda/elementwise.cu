// Elementwise ops over flat buffers: zero (a memset of any dtype), GELU (tanh approximation,
// GPT-2) and residual add in the compute dtype (float math), scale and AdamW (fp32 only;
// PyTorch's formulation, bias corrections computed in double on the host as the CPU reference
// does), and dtype conversion. One thread per element, grid-stride loops.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cmath>
#include <stdexcept>

#include "kernels/cuda/cuda_check.cuh"
#include "kernels/cuda/dtype.cuh"
#include "kernels/cuda/ops.cuh"

namespace loom::cuda {
namespace {

constexpr float kGeluScale = 0.7978845608028654f;  // sqrt(2/pi)
constexpr float kGeluCubic = 0.044715f;

unsigned grid_for(size_t n) { return unsigned(std::min<size_t>(blocks_for(n, 256), 65535 * 8)); }

template <typename T>
__global__ void gelu_forward_kernel(T* out, const T* inp, size_t n) {
  for (size_t i = size_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x) {
    const float x = load(inp[i]);
    out[i] = store<T>(0.5f * x * (1.0f + tanhf(kGeluScale * (x + kGeluCubic * x * x * x))));
  }
}

template <typename T>
__global__ void gelu_backward_kernel(T* dinp, const T* inp, const T* dout, size_t n) {
  for (size_t i = size_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x) {
    const float x = load(inp[i]);
    const float th = tanhf(kGeluScale * (x + kGeluCubic * x * x * x));
    const float g = 0.5f * (1.0f + th) + 0.5f * x * (1.0f - th * th) * kGeluScale * (1.0f + 3.0f * kGeluCubic * x * x);
    dinp[i] = store<T>(load(dout[i]) * g);  // dinp may alias dout: read before written, same element
  }
}

template <typename T>
__global__ void residual_kernel(T* out, const T* a, const T* b, size_t n) {
  for (size_t i = size_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x)
    out[i] = store<T>(load(a[i]) + load(b[i]));
}

template <typename T>
__global__ void axpy_kernel(T* y, const T* x, float alpha, size_t n) {
  for (size_t i = size_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x)
    y[i] = store<T>(load(y[i]) + alpha * load(x[i]));
}

__global__ void scale_kernel(float* x, size_t n, float s) {
  for (size_t i = size_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x) x[i] *= s;
}

__global__ void adamw_kernel(float* param, const float* grad, float* m, float* v, size_t n, float beta1, float beta2,
                             float eps, float step, float decay, float bc2_sqrt) {
  for (size_t i = size_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x) {
    const float g = grad[i];
    const float mi = beta1 * m[i] + (1.0f - beta1) * g;
    const float vi = beta2 * v[i] + (1.0f - beta2) * g * g;
    m[i] = mi;
    v[i] = vi;
    param[i] = param[i] * decay - step * mi / (sqrtf(vi) / bc2_sqrt + eps);
  }
}

template <typename D, typename S>
__global__ void convert_kernel(D* dst, const S* src, size_t n) {
  for (size_t i = size_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x)
    dst[i] = store<D>(load(src[i]));
}

template <typename D>
void convert_from(D* dst, ConstTypedPtr src, size_t n, Context& ctx) {
  switch (src.dtype) {
    case DType::f32: convert_kernel<<<grid_for(n), 256, 0, ctx.stream>>>(dst, static_cast<const float*>(src.data), n); break;
    case DType::bf16:
      convert_kernel<<<grid_for(n), 256, 0, ctx.stream>>>(dst, static_cast<const __nv_bfloat16*>(src.data), n);
      break;
    case DType::f16: convert_kernel<<<grid_for(n), 256, 0, ctx.stream>>>(dst, static_cast<const __half*>(src.data), n); break;
    default: throw std::logic_error("convert: source dtype must be fp32, bf16 or fp16");
  }
  LOOM_CUDA_LAUNCHED();
}

}  // namespace

void convert(TypedPtr dst, ConstTypedPtr src, size_t n, Context& ctx) {
  if (!n) return;
  switch (dst.dtype) {
    case DType::f32: return convert_from(static_cast<float*>(dst.data), src, n, ctx);
    case DType::bf16: return convert_from(static_cast<__nv_bfloat16*>(dst.data), src, n, ctx);
    case DType::f16: return convert_from(static_cast<__half*>(dst.data), src, n, ctx);
    default: throw std::logic_error("convert: destination dtype must be fp32, bf16 or fp16");
  }
}

void zero(TypedPtr p, size_t n, Context& ctx) {
  if (!n || !p.data) return;
  LOOM_CUDA_CHECK(cudaMemsetAsync(p.data, 0, n * dtype_size(p.dtype), ctx.stream));
}

void gelu_forward(TypedPtr out, ConstTypedPtr inp, size_t n, Context& ctx) {
  const DType dt = act_dtype("gelu_forward", out, inp);
  if (!n) return;
  dispatch_act("gelu_forward", dt, [&](auto tag) {
    using T = decltype(tag);
    gelu_forward_kernel<<<grid_for(n), 256, 0, ctx.stream>>>(act_mut<T>(out), act<T>(inp), n);
  });
  LOOM_CUDA_LAUNCHED();
}

void gelu_backward(TypedPtr dinp, ConstTypedPtr inp, ConstTypedPtr dout, size_t n, Context& ctx) {
  const DType dt = act_dtype("gelu_backward", dinp, inp, dout);
  if (!n) return;
  dispatch_act("gelu_backward", dt, [&](auto tag) {
    using T = decltype(tag);
    gelu_backward_kernel<<<grid_for(n), 256, 0, ctx.stream>>>(act_mut<T>(dinp), act<T>(inp), act<T>(dout), n);
  });
  LOOM_CUDA_LAUNCHED();
}

void residual_forward(TypedPtr out, ConstTypedPtr a, ConstTypedPtr b, size_t n, Context& ctx) {
  const DType dt = act_dtype("residual_forward", out, a, b);
  if (!n) return;
  dispatch_act("residual_forward", dt, [&](auto tag) {
    using T = decltype(tag);
    residual_kernel<<<grid_for(n), 256, 0, ctx.stream>>>(act_mut<T>(out), act<T>(a), act<T>(b), n);
  });
  LOOM_CUDA_LAUNCHED();
}

void axpy(TypedPtr y, ConstTypedPtr x, float alpha, size_t n, Context& ctx) {
  const DType dt = act_dtype("axpy", y, x);
  if (!n) return;
  dispatch_act("axpy", dt, [&](auto tag) {
    using T = decltype(tag);
    axpy_kernel<<<grid_for(n), 256, 0, ctx.stream>>>(act_mut<T>(y), act<T>(x), alpha, n);
  });
  LOOM_CUDA_LAUNCHED();
}

void scale(float* x, size_t n, float s, Context& ctx) {
  if (!n) return;
  scale_kernel<<<grid_for(n), 256, 0, ctx.stream>>>(x, n, s);
  LOOM_CUDA_LAUNCHED();
}

void adamw_update(float* param, const float* grad, float* m, float* v, size_t n, float lr, float beta1, float beta2,
                  float eps, float weight_decay, int64_t t, Context& ctx) {
  if (!n) return;
  const float bc1 = 1.0f - float(std::pow(double(beta1), double(t)));
  const float bc2_sqrt = float(std::sqrt(1.0 - std::pow(double(beta2), double(t))));
  adamw_kernel<<<grid_for(n), 256, 0, ctx.stream>>>(param, grad, m, v, n, beta1, beta2, eps, lr / bc1,
                                                    1.0f - lr * weight_decay, bc2_sqrt);
  LOOM_CUDA_LAUNCHED();
}

}  // namespace loom::cuda
