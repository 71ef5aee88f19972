#pragma once
// What the 16-bit paths ask of fp32_scratch (convert_simd.hpp), op by op, without running them:
// loom plan's CPU workspace. The slots are per thread and grow to their largest ask and stay, so
// a model's scratch is, per slot, the largest ask over its ops. An op asks either on the thread
// that calls it (outside any parallel region) or on every thread of its OpenMP team (the caller
// included; with schedule(static), those of its threads that get an iteration). Each op's ask is
// written next to its code (<op>.cpp), with the same conditions its path takes (oneDNN present
// and able, LOOM_CPU_MATMUL=reference), so the two change together; test_cpu_scratch runs a
// model and compares fp32_scratch_held_bytes with the sum.
#include <algorithm>
#include <cstddef>
#include <vector>

#include "kernels/cpu/convert_simd.hpp"

namespace loom::cpu {

struct ScratchNeed {
  size_t caller[kFp32ScratchSlots] = {};  // floats, on the calling thread (team thread 0)
  struct Ask {
    int slot;
    size_t floats;
    long iterations;  // of the op's static-scheduled loop: threads past it get none and ask nothing
  };
  std::vector<Ask> each;  // on every team thread that gets an iteration
  void on_caller(int slot, size_t n) { caller[slot] = std::max(caller[slot], n); }
  void on_each(int slot, size_t n, long iterations) { each.push_back({slot, n, iterations}); }
  // Bytes held once every op has run with `threads` OpenMP threads: thread t's slot s is the
  // largest ask of s it saw (schedule(static) gives thread t an iteration when t < iterations).
  size_t bytes(int threads) const {
    size_t floats = 0;
    for (int t = 0; t < std::max(1, threads); ++t)
      for (int s = 0; s < kFp32ScratchSlots; ++s) {
        size_t n = t == 0 ? caller[s] : 0;
        for (const Ask& a : each)
          if (a.slot == s && t < a.iterations) n = std::max(n, a.floats);
        floats += n;
      }
    return floats * sizeof(float);
  }
};

// One function per op that asks (Real: the op's storage type; float and double ask nothing).
// Linear layer (N, C) -> (N, OC): forward (with a bias or not) and backward (with an input
// gradient or not).
template <typename Real>
void matmul_scratch(ScratchNeed& need, int N, int C, int OC, bool bias, bool dinp);
// Causal attention over (B, Tn) tokens, NH heads of C / NH: forward and backward.
template <typename Real>
void attention_scratch(ScratchNeed& need, int B, int Tn, int C, int NH);
// LayerNorm of N rows of width C: forward and backward.
template <typename Real>
void layernorm_scratch(ScratchNeed& need, int N, int C);
// The token and position embeddings' forward, N tokens of width C.
template <typename Real>
void encoder_scratch(ScratchNeed& need, int N, int C);
// Cross-entropy over N logits rows of `row` columns (the rank's padded vocabulary columns).
template <typename Real>
void crossentropy_scratch(ScratchNeed& need, int N, int row);

}  // namespace loom::cpu
