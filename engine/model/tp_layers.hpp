#pragma once
// Tensor-parallel layers, in Megatron-LM's vocabulary. Each helper is a light, stateless view
// (the Backend, this rank's place in the tp group, and its dimensions); parameters, activations
// and gradients are passed in, in the Backend ops' argument order. Each helper owns the
// collectives its layer needs; the tp communicator is touched only when tp size > 1, so with
// tp = 1 the helpers issue exactly the bare Backend ops.
//
// Megatron's conjugate operators on the residual stream (replicated over the tp group):
//   f: identity forward, all-reduce backward   (entering a column-parallel layer)
//   g: all-reduce forward, identity backward   (leaving a row-parallel layer)
// Shapes marked /tp are per rank. N = B*T rows. Activations and weights are in the compute dtype
// (typed pointers), parameter gradients in fp32 (float*), as the Backend ops take them.
#include <cstddef>
#include <cstdint>

#include "kernels/backend.hpp"
#include "parallel/communicator.hpp"

namespace loom {

// This rank's place in its tensor-parallel group. `comm` (the tp group) is only used when
// size > 1. The model sees just the Communicator interface: no MPI, no NCCL.
struct TensorParallel {
  int rank = 0, size = 1;
  parallel::Communicator* comm = nullptr;
  // The rank that adds replicated terms (biases, wpe) ahead of a sum over the group, so that the
  // sum holds them once.
  bool lead() const { return rank == 0; }
};

// buf (n) becomes its reduction over the tp group, in place; nothing happens when tp size is 1.
void tp_all_reduce(const TensorParallel& tp, TypedPtr buf, size_t n, parallel::ReduceOp op = parallel::ReduceOp::Sum);

// Linear layer whose weight (OC, C) is split by output rows: this rank holds OC/tp rows (and the
// matching OC/tp bias entries) and produces its OC/tp output columns. Input replicated (f).
class ColumnParallelLinear {
 public:
  // `in` = C, `out` = this rank's OC/tp.
  ColumnParallelLinear(Backend& be, TensorParallel tp, int in, int out) : be_(be), tp_(tp), in_(in), out_(out) {}
  // out (N,OC/tp) = inp (N,C) @ w (OC/tp,C)^T + b (OC/tp) [b may be null]. f forward: identity.
  void forward(TypedPtr out, ConstTypedPtr inp, ConstTypedPtr w, ConstTypedPtr b, int N) const;
  // dinp (N,C) = sum over tp of dout (N,OC/tp) @ w (f backward: all-reduce);
  // dw (OC/tp,C) += dout^T @ inp; db (OC/tp) += colsum(dout) [if not null].
  void backward(TypedPtr dinp, float* dw, float* db, ConstTypedPtr dout, ConstTypedPtr inp, ConstTypedPtr w, int N) const;
  // forward, then out = gelu(pre) with pre the layer's output (kept for the backward); one op, so
  // a backend can fuse them. Local: a column slice's GELU needs no other rank.
  void forward_gelu(TypedPtr out, TypedPtr pre, ConstTypedPtr inp, ConstTypedPtr w, ConstTypedPtr b, int N) const;

 private:
  Backend& be_;
  TensorParallel tp_;
  int in_, out_;
};

// Linear layer whose weight (OC, C) is split by input columns: this rank holds (OC, C/tp) and
// reads its C/tp input columns (a column-parallel layer's output, already split). The bias (OC)
// is replicated. Output replicated (g).
class RowParallelLinear {
 public:
  // `in` = this rank's C/tp, `out` = OC.
  RowParallelLinear(Backend& be, TensorParallel tp, int in, int out) : be_(be), tp_(tp), in_(in), out_(out) {}
  // out (N,OC) = sum over tp of inp (N,C/tp) @ w (OC,C/tp)^T, + b (OC) once: added by tp rank 0
  // only ahead of g, the all-reduce.
  void forward(TypedPtr out, ConstTypedPtr inp, ConstTypedPtr w, ConstTypedPtr b, int N) const;
  // g backward: identity, no communication (dout is replicated). dinp (N,C/tp) = dout @ w;
  // dw (OC,C/tp) += dout^T @ inp; db (OC) += colsum(dout) on every rank (the replicated bias
  // gets the same gradient everywhere).
  void backward(TypedPtr dinp, float* dw, float* db, ConstTypedPtr dout, ConstTypedPtr inp, ConstTypedPtr w, int N) const;
  // backward with dinp then multiplied by gelu'(pre): the backward through the GELU before this
  // layer, in one op (local, as dinp's own slice is).
  void backward_gelu(TypedPtr dinp, float* dw, float* db, ConstTypedPtr dout, ConstTypedPtr inp, ConstTypedPtr w,
                     ConstTypedPtr pre, int N) const;

 private:
  Backend& be_;
  TensorParallel tp_;
  int in_, out_;
};

// LoRA's low-rank branch beside a tensor-parallel linear layer: y += scale * (x A^T) B^T. The
// branch keeps us = scale * x A^T (N, r) for backward. Its backward runs after the layer's own
// (which has written dinp) and adds the branch's part to dinp. Both helpers need `du` (N, r) and
// `wide` (N, max(in, out)) scratch. LoraBranch is what both flavours hold: the backend, the tp
// group, the layer's local input and output widths, the rank and the scale.
// With `dropout` > 0 and a non-zero seed, the adapter reads dropout(x) (the backend's counter-
// based mask over the input's global columns, so any tp split drops the same elements); backward
// recomputes the mask from the seed instead of keeping the dropped input.
class LoraBranch {
 public:
  LoraBranch(Backend& be, TensorParallel tp, int in, int out, int rank, float scale, float dropout = 0)
      : be_(be), tp_(tp), in_(in), out_(out), r_(rank), scale_(scale), dropout_(dropout) {}

 protected:
  // out (N, in) = dropout(x) with this layer's input columns starting at global column
  // `col_offset` of `width`.
  void drop(TypedPtr out, ConstTypedPtr x, uint64_t seed, int N, int col_offset, int width) const {
    be_.dropout(out, x, dropout_, seed, N, in_, col_offset, width);
  }
  bool dropping(uint64_t seed) const { return seed != 0 && dropout_ > 0; }
  Backend& be_;
  TensorParallel tp_;
  int in_, out_, r_;
  float scale_, dropout_;
};

// Column-parallel layer (qkv, mlp.fc; `out` = OC/tp): A (r, C) replicated, B (OC/tp, r) split
// like the weight. Forward: no communication. Backward: du = scale * dy B is a partial sum over
// the tp group's output columns: one all-reduce of (N, r), after which dA and dinp's share are
// the same on every rank.
class LoraColumn : public LoraBranch {
 public:
  using LoraBranch::LoraBranch;
  void forward(TypedPtr y, TypedPtr us, ConstTypedPtr x, ConstTypedPtr A, ConstTypedPtr B, TypedPtr wide, int N,
               uint64_t dropout_seed = 0) const;
  void backward(TypedPtr dinp, float* dA, float* dB, ConstTypedPtr dy, ConstTypedPtr x, ConstTypedPtr us,
                ConstTypedPtr A, ConstTypedPtr B, TypedPtr du, TypedPtr wide, int N, uint64_t dropout_seed = 0) const;
};

// Row-parallel layer (attention and MLP projections; `in` = C/tp, `out` = OC): A (r, C/tp) split
// by columns like the weight, B (OC, r) replicated. Forward: x A^T is a partial sum over the
// ranks' input columns: one all-reduce of (N, r); the branch is added to the layer's output after
// its all-reduce (the same on every rank). Backward: no communication.
class LoraRow : public LoraBranch {
 public:
  using LoraBranch::LoraBranch;
  void forward(TypedPtr y, TypedPtr us, ConstTypedPtr x, ConstTypedPtr A, ConstTypedPtr B, TypedPtr wide, int N,
               uint64_t dropout_seed = 0) const;
  void backward(TypedPtr dinp, float* dA, float* dB, ConstTypedPtr dy, ConstTypedPtr x, ConstTypedPtr us,
                ConstTypedPtr A, ConstTypedPtr B, TypedPtr du, TypedPtr wide, int N, uint64_t dropout_seed = 0) const;
};

// Token + position embedding with the token table split by vocabulary rows: rank r holds rows
// [r*Vp/tp, (r+1)*Vp/tp) of wte (Vp, C); wpe (T, C) is replicated.
class VocabParallelEmbedding {
 public:
  VocabParallelEmbedding(Backend& be, TensorParallel tp, int vocab_pad, int C)
      : be_(be), tp_(tp), rows_(vocab_pad / tp.size), vocab_start_(tp.rank * rows_), C_(C) {}
  // out (B,T,C) = sum over tp of wte_slice (Vp/tp,C)[tokens - vocab_start] (zero for tokens
  // outside the slice, so the sum is exact), + wpe (T,C) added by tp rank 0 only.
  void forward(TypedPtr out, const int32_t* tokens, ConstTypedPtr wte, ConstTypedPtr wpe, int B, int T) const;
  // No communication (dout (B,T,C) is replicated): dwte (Vp/tp,C) += dout rows scattered by the
  // tokens in this rank's slice; dwpe (T,C) += sum over the batch, on every rank.
  void backward(float* dwte, float* dwpe, ConstTypedPtr dout, const int32_t* tokens, int B, int T) const;
  int vocab_start() const { return vocab_start_; }
  int rows() const { return rows_; }  // Vp/tp

 private:
  Backend& be_;
  TensorParallel tp_;
  int rows_, vocab_start_, C_;
};

// The LM head's loss: cross-entropy over logits split by vocabulary columns (the head is a
// ColumnParallelLinear over the vocabulary, tied to wte's slice, so its backward all-reduces
// d(input)). The logits are never gathered: tp = 1 runs the fused softmax_crossentropy; tp > 1
// reduces per-token scalars only, in three steps (max, all-reduce max; partial sums, all-reduce
// sum; finish), and its backward needs no communication.
class VocabParallelCrossEntropy {
 public:
  // `vocab` = V real tokens, `vocab_pad` = Vp columns in all.
  VocabParallelCrossEntropy(Backend& be, TensorParallel tp, int vocab, int vocab_pad);
  // losses (N) = -log softmax(logits)[target] over the V real columns; with write_grad the
  // logits (N,Vp/tp) become dloss * (softmax - onehot(target)) on real columns, 0 on padding.
  // maxes (N) and partials (2N) are scratch for tp > 1 (unused with tp = 1).
  void forward(float* losses, TypedPtr logits, const int32_t* targets, int N, float dloss, bool write_grad,
               float* maxes, float* partials) const;

 private:
  Backend& be_;
  TensorParallel tp_;
  int vocab_, vocab_pad_, cols_, vocab_start_, v_real_;  // cols_ = Vp/tp; v_real_ real columns of the slice
};

}  // namespace loom
