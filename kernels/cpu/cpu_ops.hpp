#pragma once
// The CPU reference ops, templated on the scalar type: the backend uses float, the
// finite-difference tests use double. Semantics are those documented in kernels/backend.hpp.
#include <cstddef>
#include <cstdint>

namespace loom::cpu {

template <typename T>
void encoder_forward(T* out, const int32_t* tokens, const T* wte, const T* wpe, int B, int Tn, int C,
                     int vocab_start, int vocab_rows);
template <typename T>
void encoder_backward(T* dwte, T* dwpe, const T* dout, const int32_t* tokens, int B, int Tn, int C,
                      int vocab_start, int vocab_rows);

template <typename T>
void layernorm_forward(T* out, T* mean, T* rstd, const T* inp, const T* w, const T* b, int N, int C);
template <typename T>
void layernorm_backward(T* dinp, T* dw, T* db, const T* dout, const T* inp, const T* w, const T* mean,
                        const T* rstd, int N, int C);

template <typename T>
void matmul_forward(T* out, const T* inp, const T* w, const T* bias, int N, int C, int OC);
template <typename T>
void matmul_backward(T* dinp, T* dw, T* dbias, const T* dout, const T* inp, const T* w, int N, int C, int OC);

// `att` (B,NH,T,T) saves the softmax probabilities (zero above the diagonal).
template <typename T>
void attention_forward(T* out, T* att, const T* qkv, int B, int Tn, int C, int NH);
template <typename T>
void attention_backward(T* dqkv, const T* dout, const T* qkv, const T* att, int B, int Tn, int C, int NH);

template <typename T>
void gelu_forward(T* out, const T* inp, size_t n);
template <typename T>
void gelu_backward(T* dinp, const T* inp, const T* dout, size_t n);

template <typename T>
void softmax_crossentropy(T* losses, T* logits, const int32_t* targets, int N, int V, int Vp, T dloss,
                          bool write_grad);

template <typename T>
void crossentropy_max(T* maxes, const T* logits, int N, int Vl, int v_real);
template <typename T>
void crossentropy_partials(T* partials, const T* logits, const T* maxes, const int32_t* targets, int N, int Vl,
                           int v_real, int vocab_start);
template <typename T>
void crossentropy_finish(T* losses, T* logits, const T* maxes, const T* partials, const int32_t* targets, int N,
                         int Vl, int v_real, int vocab_start, T dloss, bool write_grad);

template <typename T>
void adamw_update(T* param, const T* grad, T* m, T* v, size_t n, T lr, T beta1, T beta2, T eps, T weight_decay,
                  int64_t t);

// Deterministic reductions: fixed-size chunks summed in a fixed order whatever the thread count.
template <typename T>
double sum_squares(const T* x, size_t n);
template <typename T>
double sum(const T* x, size_t n);

// Splits [0, n) into blocks of `block` columns for deterministic column-parallel reductions.
constexpr int kColumnBlock = 32;

}  // namespace loom::cpu
