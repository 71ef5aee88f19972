#include "engine/model/tp_layers.hpp"

#include <algorithm>

namespace loom {

void tp_all_reduce(const TensorParallel& tp, TypedPtr buf, size_t n, parallel::ReduceOp op) {
  if (tp.size > 1) tp.comm->all_reduce(buf, n, op);
}

void ColumnParallelLinear::forward(TypedPtr out, ConstTypedPtr inp, ConstTypedPtr w, ConstTypedPtr b, int N) const {
  be_.matmul_forward(out, inp, w, b, N, in_, out_);
}

void ColumnParallelLinear::backward(TypedPtr dinp, float* dw, float* db, ConstTypedPtr dout, ConstTypedPtr inp,
                                    ConstTypedPtr w, int N) const {
  be_.matmul_backward(dinp, dw, db, dout, inp, w, N, in_, out_);
  tp_all_reduce(tp_, dinp, size_t(N) * size_t(in_));
}

void ColumnParallelLinear::forward_gelu(TypedPtr out, TypedPtr pre, ConstTypedPtr inp, ConstTypedPtr w,
                                        ConstTypedPtr b, int N) const {
  be_.matmul_gelu_forward(out, pre, inp, w, b, N, in_, out_);
}

void RowParallelLinear::forward(TypedPtr out, ConstTypedPtr inp, ConstTypedPtr w, ConstTypedPtr b, int N) const {
  be_.matmul_forward(out, inp, w, tp_.lead() ? b : ConstTypedPtr(), N, in_, out_);
  tp_all_reduce(tp_, out, size_t(N) * size_t(out_));
}

void RowParallelLinear::backward(TypedPtr dinp, float* dw, float* db, ConstTypedPtr dout, ConstTypedPtr inp,
                                 ConstTypedPtr w, int N) const {
  be_.matmul_backward(dinp, dw, db, dout, inp, w, N, in_, out_);
}

void RowParallelLinear::backward_gelu(TypedPtr dinp, float* dw, float* db, ConstTypedPtr dout, ConstTypedPtr inp,
                                      ConstTypedPtr w, ConstTypedPtr pre, int N) const {
  be_.matmul_backward_gelu(dinp, dw, db, dout, inp, w, pre, N, in_, out_);
}

void VocabParallelEmbedding::forward(TypedPtr out, const int32_t* tokens, ConstTypedPtr wte, ConstTypedPtr wpe,
                                     int B, int T) const {
  be_.encoder_forward(out, tokens, wte, tp_.lead() ? wpe : ConstTypedPtr(), B, T, C_, vocab_start_, rows_);
  tp_all_reduce(tp_, out, size_t(B) * size_t(T) * size_t(C_));
}

void VocabParallelEmbedding::backward(float* dwte, float* dwpe, ConstTypedPtr dout, const int32_t* tokens, int B,
                                      int T) const {
  be_.encoder_backward(dwte, dwpe, dout, tokens, B, T, C_, vocab_start_, rows_);
}

VocabParallelCrossEntropy::VocabParallelCrossEntropy(Backend& be, TensorParallel tp, int vocab, int vocab_pad)
    : be_(be),
      tp_(tp),
      vocab_(vocab),
      vocab_pad_(vocab_pad),
      cols_(vocab_pad / tp.size),
      vocab_start_(tp.rank * cols_),
      v_real_(std::clamp(vocab - vocab_start_, 0, cols_)) {}

void VocabParallelCrossEntropy::forward(float* losses, TypedPtr logits, const int32_t* targets, int N, float dloss,
                                        bool write_grad, float* maxes, float* partials) const {
  if (tp_.size == 1) {
    be_.softmax_crossentropy(losses, logits, targets, N, vocab_, vocab_pad_, dloss, write_grad);
    return;
  }
  be_.crossentropy_max(maxes, logits, N, cols_, v_real_);
  tp_all_reduce(tp_, maxes, size_t(N), parallel::ReduceOp::Max);
  be_.crossentropy_partials(partials, logits, maxes, targets, N, cols_, v_real_, vocab_start_);
  tp_all_reduce(tp_, partials, 2 * size_t(N));
  be_.crossentropy_finish(losses, logits, maxes, partials, targets, N, cols_, v_real_, vocab_start_, dloss,
                          write_grad);
}

// us = scale * x A^T: axpy by (scale - 1) scales in place. With dropout the adapter reads
// dropout(x), made in `wide` (which the branch's output overwrites after).
void LoraColumn::forward(TypedPtr y, TypedPtr us, ConstTypedPtr x, ConstTypedPtr A, ConstTypedPtr B, TypedPtr wide,
                         int N, uint64_t seed) const {
  const size_t nr = size_t(N) * r_;
  ConstTypedPtr xin = x;
  if (dropping(seed)) drop(wide, x, seed, N, 0, in_), xin = wide;
  be_.matmul_forward(us, xin, A, ConstTypedPtr(), N, in_, r_);
  be_.axpy(us, us, scale_ - 1.0f, nr);
  be_.matmul_forward(wide, us, B, ConstTypedPtr(), N, r_, out_);
  be_.residual_forward(y, y, wide, size_t(N) * out_);
}

// dA needs the dropped input again (recomputed into `wide` from the seed), and the input
// gradient passes through the same mask.
void LoraColumn::backward(TypedPtr dinp, float* dA, float* dB, ConstTypedPtr dy, ConstTypedPtr x, ConstTypedPtr us,
                          ConstTypedPtr A, ConstTypedPtr B, TypedPtr du, TypedPtr wide, int N, uint64_t seed) const {
  const size_t nr = size_t(N) * r_;
  be_.matmul_backward(du, dB, nullptr, dy, us, B, N, r_, out_);  // du = dy B (this rank's columns); dB += dy^T us
  tp_all_reduce(tp_, du, nr);
  be_.axpy(du, du, scale_ - 1.0f, nr);
  if (dropping(seed)) {
    drop(wide, x, seed, N, 0, in_);
    be_.matmul_backward(TypedPtr(), dA, nullptr, du, wide, A, N, in_, r_);  // dA += du^T dropout(x)
    be_.matmul_backward(wide, nullptr, nullptr, du, x, A, N, in_, r_);      // wide = du A
    drop(wide, wide, seed, N, 0, in_);
  } else {
    be_.matmul_backward(wide, dA, nullptr, du, x, A, N, in_, r_);  // wide = du A; dA += du^T x
  }
  be_.residual_forward(dinp, dinp, wide, size_t(N) * in_);
}

void LoraRow::forward(TypedPtr y, TypedPtr us, ConstTypedPtr x, ConstTypedPtr A, ConstTypedPtr B, TypedPtr wide,
                      int N, uint64_t seed) const {
  const size_t nr = size_t(N) * r_;
  ConstTypedPtr xin = x;
  if (dropping(seed)) drop(wide, x, seed, N, tp_.rank * in_, tp_.size * in_), xin = wide;
  be_.matmul_forward(us, xin, A, ConstTypedPtr(), N, in_, r_);  // this rank's input columns' part
  tp_all_reduce(tp_, us, nr);
  be_.axpy(us, us, scale_ - 1.0f, nr);
  be_.matmul_forward(wide, us, B, ConstTypedPtr(), N, r_, out_);
  be_.residual_forward(y, y, wide, size_t(N) * out_);
}

void LoraRow::backward(TypedPtr dinp, float* dA, float* dB, ConstTypedPtr dy, ConstTypedPtr x, ConstTypedPtr us,
                       ConstTypedPtr A, ConstTypedPtr B, TypedPtr du, TypedPtr wide, int N, uint64_t seed) const {
  const size_t nr = size_t(N) * r_;
  be_.matmul_backward(du, dB, nullptr, dy, us, B, N, r_, out_);  // the same on every rank
  be_.axpy(du, du, scale_ - 1.0f, nr);
  if (dropping(seed)) {
    drop(wide, x, seed, N, tp_.rank * in_, tp_.size * in_);
    be_.matmul_backward(TypedPtr(), dA, nullptr, du, wide, A, N, in_, r_);
    be_.matmul_backward(wide, nullptr, nullptr, du, x, A, N, in_, r_);
    drop(wide, wide, seed, N, tp_.rank * in_, tp_.size * in_);
  } else {
    be_.matmul_backward(wide, dA, nullptr, du, x, A, N, in_, r_);
  }
  be_.residual_forward(dinp, dinp, wide, size_t(N) * in_);
}

}  // namespace loom
