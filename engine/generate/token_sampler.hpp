#pragma once
// The next token from a model's logits: greedy (temperature 0), or drawn from the softmax at a
// temperature, restricted to the top-k tokens and/or the smallest set whose probability reaches
// top-p (nucleus sampling; both as in Hugging Face's generate()). The random stream is Loom's
// own (splitmix64 of the seed and a counter): the same seed gives the same tokens on any machine
// and every rank of a tensor-parallel group, which draws identically without communicating.
#include <cstdint>

namespace loom {

struct SamplingConfig {
  double temperature = 1.0;  // 0: greedy (argmax, the lowest id on a tie)
  int top_k = 0;             // 0: no limit
  double top_p = 1.0;        // 1: no limit
  uint64_t seed = 1337;
};

class TokenSampler {
 public:
  // Throws std::invalid_argument for a negative temperature or top_k, or top_p outside (0, 1].
  explicit TokenSampler(const SamplingConfig& c);
  // One token id in [0, V) from logits[0, V).
  int next(const float* logits, int V);

 private:
  SamplingConfig c_;
  uint64_t draws_ = 0;
};

}  // namespace loom
