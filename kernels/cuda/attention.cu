// Fused causal self-attention, flash-attention's algorithm without its tiling: no T x T
// score matrix is ever stored. Forward: one warp per query row (b, h, i) walks the keys j <= i
// with an online softmax (running max and sum), accumulating the output in registers, and saves
// the row's log-sum-exp. Backward recomputes the probabilities from it:
//   D_i = dO_i . O_i,  P_ij = exp(q_i.k_j * s - lse_i),  dS_ij = P_ij (dO_i.v_j - D_i)
//   dQ_i = s * sum_{j<=i} dS_ij k_j        (a warp per query row)
//   dK_j = s * sum_{i>=j} dS_ij q_i,  dV_j = sum_{i>=j} P_ij dO_i   (a warp per key row)
// Every sum runs in a fixed order in one warp: deterministic, no atomics. Head size <= 256.
// qkv, out, dout and dqkv in the compute dtype (loaded to float); scores, the softmax, the
// log-sum-exp (saved, fp32) and D (fp32 workspace) in fp32.
// These row kernels are the fallback: head sizes 64 and 128 go to the tiled kernels of
// flash_attention_fma.cu (the launchers below pick), unless LOOM_CUDA_ATTENTION=rowwise is set
// in the environment (to compare the two, e.g. in tests/bench/bench_cuda_ops).
#include <cmath>
#include <cstdlib>
#include <cstring>

#include "kernels/cuda/cuda_check.cuh"
#include "kernels/cuda/dtype.cuh"
#include "kernels/cuda/flash_attention.cuh"
#include "kernels/cuda/ops.cuh"
#include "kernels/cuda/warp_reduce.cuh"

namespace loom::cuda {
namespace {

constexpr int kMaxPerLane = 8;  // head size up to 32 * 8 = 256

// The (b, h, t) row this warp handles, rows ordered b-major, then head, then t; false past the end.
struct Row {
  int b, h, t, lane;
};
__device__ bool warp_row(int B, int T, int NH, Row& r) {
  const size_t warp = size_t(blockIdx.x) * (blockDim.x / 32) + threadIdx.x / 32;
  r.lane = threadIdx.x % 32;
  if (warp >= size_t(B) * NH * T) return false;
  r.t = int(warp % T);
  r.h = int((warp / T) % NH);
  r.b = int(warp / (size_t(T) * NH));
  return true;
}

// Row pointers of (b, t, head h) in qkv (B, T, 3C): q, k, v.
template <typename S>
__device__ const S* q_row(const S* qkv, int b, int t, int h, int T, int C, int hs) {
  return qkv + (size_t(b) * T + t) * 3 * C + size_t(h) * hs;
}

template <typename S>
__global__ void attention_forward_kernel(S* out, float* lse, const S* qkv, int B, int T, int C, int NH) {
  Row w;
  if (!warp_row(B, T, NH, w)) return;
  const int i = w.t, h = w.h, b = w.b, lane = w.lane;
  const int hs = C / NH;
  const float scale = rsqrtf(float(hs));
  const S* q = q_row(qkv, b, i, h, T, C, hs);
  float qr[kMaxPerLane], acc[kMaxPerLane];
  for (int r = 0; r < kMaxPerLane; ++r) {
    const int d = lane + 32 * r;
    qr[r] = d < hs ? load(q[d]) : 0.0f;
    acc[r] = 0.0f;
  }
  float m = -INFINITY, l = 0.0f;
  for (int j = 0; j <= i; ++j) {
    const S* k = q_row(qkv, b, j, h, T, C, hs) + C;
    const S* v = k + C;
    float s = 0;
    for (int r = 0; r < kMaxPerLane; ++r) {
      const int d = lane + 32 * r;
      if (d < hs) s += qr[r] * load(k[d]);
    }
    s = warp_sum(s) * scale;
    const float m_new = fmaxf(m, s);
    const float corr = expf(m - m_new), p = expf(s - m_new);
    l = l * corr + p;
    for (int r = 0; r < kMaxPerLane; ++r) {
      const int d = lane + 32 * r;
      if (d < hs) acc[r] = acc[r] * corr + p * load(v[d]);
    }
    m = m_new;
  }
  S* o = out + (size_t(b) * T + i) * C + size_t(h) * hs;
  for (int r = 0; r < kMaxPerLane; ++r) {
    const int d = lane + 32 * r;
    if (d < hs) o[d] = store<S>(acc[r] / l);
  }
  if (lane == 0) lse[(size_t(b) * NH + h) * T + i] = m + logf(l);
}

// D (B, NH, T) = dO . O per row.
template <typename S>
__global__ void attention_delta_kernel(float* delta, const S* dout, const S* out, int B, int T, int C, int NH) {
  Row w;
  if (!warp_row(B, T, NH, w)) return;
  const int i = w.t, h = w.h, b = w.b, lane = w.lane;
  const int hs = C / NH;
  const size_t off = (size_t(b) * T + i) * C + size_t(h) * hs;
  float s = 0;
  for (int d = lane; d < hs; d += 32) s += load(dout[off + d]) * load(out[off + d]);
  s = warp_sum(s);
  if (lane == 0) delta[(size_t(b) * NH + h) * T + i] = s;
}

template <typename S>
__global__ void attention_dq_kernel(S* dqkv, const S* dout, const S* qkv, const float* lse, const float* delta, int B,
                                    int T, int C, int NH) {
  Row w;
  if (!warp_row(B, T, NH, w)) return;
  const int i = w.t, h = w.h, b = w.b, lane = w.lane;
  const int hs = C / NH;
  const float scale = rsqrtf(float(hs));
  const size_t row = (size_t(b) * NH + h) * T + i;
  const float L = lse[row], Di = delta[row];
  const S* q = q_row(qkv, b, i, h, T, C, hs);
  const S* go = dout + (size_t(b) * T + i) * C + size_t(h) * hs;
  float qr[kMaxPerLane], gr[kMaxPerLane], acc[kMaxPerLane];
  for (int r = 0; r < kMaxPerLane; ++r) {
    const int d = lane + 32 * r;
    qr[r] = d < hs ? load(q[d]) : 0.0f;
    gr[r] = d < hs ? load(go[d]) : 0.0f;
    acc[r] = 0.0f;
  }
  for (int j = 0; j <= i; ++j) {
    const S* k = q_row(qkv, b, j, h, T, C, hs) + C;
    const S* v = k + C;
    float s = 0, dp = 0;
    for (int r = 0; r < kMaxPerLane; ++r) {
      const int d = lane + 32 * r;
      if (d < hs) {
        s += qr[r] * load(k[d]);
        dp += gr[r] * load(v[d]);
      }
    }
    s = warp_sum(s) * scale;
    dp = warp_sum(dp);
    const float p = expf(s - L), ds = p * (dp - Di);
    for (int r = 0; r < kMaxPerLane; ++r) {
      const int d = lane + 32 * r;
      if (d < hs) acc[r] += ds * load(k[d]);
    }
  }
  S* dq = dqkv + (size_t(b) * T + i) * 3 * C + size_t(h) * hs;
  for (int r = 0; r < kMaxPerLane; ++r) {
    const int d = lane + 32 * r;
    if (d < hs) dq[d] = store<S>(acc[r] * scale);
  }
}

template <typename S>
__global__ void attention_dkv_kernel(S* dqkv, const S* dout, const S* qkv, const float* lse, const float* delta, int B,
                                     int T, int C, int NH) {
  Row w;
  if (!warp_row(B, T, NH, w)) return;
  const int j = w.t, h = w.h, b = w.b, lane = w.lane;
  const int hs = C / NH;
  const float scale = rsqrtf(float(hs));
  const S* k = q_row(qkv, b, j, h, T, C, hs) + C;
  const S* v = k + C;
  float kr[kMaxPerLane], vr[kMaxPerLane], dk[kMaxPerLane], dv[kMaxPerLane];
  for (int r = 0; r < kMaxPerLane; ++r) {
    const int d = lane + 32 * r;
    kr[r] = d < hs ? load(k[d]) : 0.0f;
    vr[r] = d < hs ? load(v[d]) : 0.0f;
    dk[r] = dv[r] = 0.0f;
  }
  for (int i = j; i < T; ++i) {
    const S* q = q_row(qkv, b, i, h, T, C, hs);
    const S* go = dout + (size_t(b) * T + i) * C + size_t(h) * hs;
    const size_t row = (size_t(b) * NH + h) * T + i;
    float s = 0, dp = 0;
    for (int r = 0; r < kMaxPerLane; ++r) {
      const int d = lane + 32 * r;
      if (d < hs) {
        s += load(q[d]) * kr[r];
        dp += load(go[d]) * vr[r];
      }
    }
    s = warp_sum(s) * scale;
    dp = warp_sum(dp);
    const float p = expf(s - lse[row]), ds = p * (dp - delta[row]);
    for (int r = 0; r < kMaxPerLane; ++r) {
      const int d = lane + 32 * r;
      if (d < hs) {
        dk[r] += ds * load(q[d]);
        dv[r] += p * load(go[d]);
      }
    }
  }
  S* dkp = dqkv + (size_t(b) * T + j) * 3 * C + C + size_t(h) * hs;
  S* dvp = dkp + C;
  for (int r = 0; r < kMaxPerLane; ++r) {
    const int d = lane + 32 * r;
    if (d < hs) {
      dkp[d] = store<S>(dk[r] * scale);
      dvp[d] = store<S>(dv[r]);
    }
  }
}

void check_head_size(int C, int NH) {
  if (NH <= 0 || C % NH != 0 || C / NH > 32 * kMaxPerLane)
    throw std::runtime_error("CUDA attention: head size " + std::to_string(NH > 0 ? C / NH : 0) +
                             " is not supported (C must divide by NH, head size <= 256)");
}

// Whether the tiled kernels take a call of B x NH heads of size hs in dtype dt. Their grid's y
// is B * NH, at most 65535 blocks; the row kernels' 1-D grid has no such limit.
bool use_flash(int B, int NH, int hs, DType dt) {
  static const bool rowwise = [] {
    const char* v = std::getenv("LOOM_CUDA_ATTENTION");
    return v && std::strcmp(v, "rowwise") == 0;
  }();
  return !rowwise && size_t(B) * NH <= 65535 && flash_attention_supported(hs, dt);
}

}  // namespace

// `saved` is the log-sum-exp of each (b, h, t) row: B * NH * T floats, whatever the compute dtype.
void attention_forward(TypedPtr out, void* saved, ConstTypedPtr qkv, int B, int T, int C, int NH, Context& ctx) {
  const DType dt = act_dtype("attention_forward", out, qkv);
  check_head_size(C, NH);
  const size_t rows = size_t(B) * NH * T;
  if (rows == 0) return;
  float* lse = static_cast<float*>(saved);
  if (use_flash(B, NH, C / NH, dt)) return flash_attention_forward(out, lse, qkv, B, T, C, NH, ctx.stream);
  dispatch_act("attention_forward", dt, [&](auto tag) {
    using S = decltype(tag);
    attention_forward_kernel<<<blocks_for(rows, 4), 128, 0, ctx.stream>>>(act_mut<S>(out), lse, act<S>(qkv), B, T, C,
                                                                          NH);
  });
  LOOM_CUDA_LAUNCHED();
}

void attention_backward(TypedPtr dqkv, ConstTypedPtr dout, ConstTypedPtr qkv, ConstTypedPtr out, const void* saved,
                        int B, int T, int C, int NH, Context& ctx) {
  const DType dt = act_dtype("attention_backward", dqkv, dout, qkv, out);
  const Workspace ws = ctx.workspace(size_t(B) * NH * T * sizeof(float));  // delta: a float per row
  const cudaStream_t stream = ctx.stream;
  check_head_size(C, NH);
  const size_t rows = size_t(B) * NH * T;
  if (rows == 0) return;
  if (ws.bytes < rows * sizeof(float)) throw std::runtime_error("attention_backward: workspace too small");
  float* delta = static_cast<float*>(ws.ptr);
  const float* lse = static_cast<const float*>(saved);
  if (use_flash(B, NH, C / NH, dt))
    return flash_attention_backward(dqkv, dout, qkv, out, lse, delta, B, T, C, NH, stream);
  dispatch_act("attention_backward", dt, [&](auto tag) {
    using S = decltype(tag);
    attention_delta_kernel<<<blocks_for(rows, 4), 128, 0, stream>>>(delta, act<S>(dout), act<S>(out), B, T, C, NH);
    LOOM_CUDA_LAUNCHED();
    attention_dq_kernel<<<blocks_for(rows, 4), 128, 0, stream>>>(act_mut<S>(dqkv), act<S>(dout), act<S>(qkv), lse,
                                                                 delta, B, T, C, NH);
    LOOM_CUDA_LAUNCHED();
    attention_dkv_kernel<<<blocks_for(rows, 4), 128, 0, stream>>>(act_mut<S>(dqkv), act<S>(dout), act<S>(qkv), lse,
                                                                  delta, B, T, C, NH);
    LOOM_CUDA_LAUNCHED();
  });
}

}  // namespace loom::cuda
