// loom plan's CPU workspace against what the CPU backend really keeps: a model runs a forward and
// a backward pass in 16-bit compute on every OpenMP thread, and the fp32 scratch its ops then hold
// (fp32_scratch_held_bytes, over all threads) must equal cpu_scratch_bytes of the shapes
// gpt_cpu_scratch_shapes lists for it, byte for byte. On a CPU whose oneDNN runs bf16 the matmuls
// ask nothing and attention asks its score blocks; without it (or with LOOM_CPU_MATMUL=reference,
// which every machine runs here) every linear layer widens: both paths are checked wherever
// this runs, and a missing op or a wrong size shows as a difference.
#include <catch2/catch.hpp>
#include <omp.h>

#include <cmath>
#include <cstdlib>
#include <string>
#include <vector>

#include "engine/model/gpt.hpp"
#include "engine/model/gpt_memory.hpp"
#include "engine/model/param_table.hpp"
#include "kernels/cpu/convert_simd.hpp"

using namespace loom;

namespace {

// Frees every thread's scratch (each thread of the team frees its own).
void release_all_scratch() {
  cpu::release_fp32_scratch();
#pragma omp parallel
  cpu::release_fp32_scratch();
}

struct MatmulMode {  // LOOM_CPU_MATMUL for the scope, then as it was
  explicit MatmulMode(const char* v) {
    if (const char* was = std::getenv("LOOM_CPU_MATMUL")) before_ = was, had_ = true;
    if (v) setenv("LOOM_CPU_MATMUL", v, 1);
    else unsetenv("LOOM_CPU_MATMUL");
  }
  ~MatmulMode() {
    if (had_) setenv("LOOM_CPU_MATMUL", before_.c_str(), 1);
    else unsetenv("LOOM_CPU_MATMUL");
  }

 private:
  std::string before_;
  bool had_ = false;
};

// Runs one forward and backward of `shape` in `compute` and returns {held, predicted} bytes.
std::pair<size_t, size_t> run_and_predict(const GptShape& shape, int B, DType compute) {
  release_all_scratch();
  REQUIRE(cpu_scratch_held_bytes() == 0);
  auto be = make_cpu_backend();
  {
    Gpt model(*be, shape, B, {}, {}, 1, Recompute::None, compute);
    std::vector<float> params(model.num_params());
    init_params(model.table(), shape, 7, params.data());
    model.set_params(params.data());
    if (shape.lora.on()) {
      std::vector<float> frozen(model.frozen_table().total());
      init_params(model.frozen_table(), shape, 9, frozen.data());
      model.set_frozen(frozen.data());
    }
    const int n = B * shape.seq_len;
    std::vector<int32_t> tokens(static_cast<size_t>(n)), targets(static_cast<size_t>(n));
    for (int i = 0; i < n; ++i) {
      tokens[size_t(i)] = (i * 13 + 5) % shape.vocab;
      targets[size_t(i)] = (i * 7 + 3) % shape.vocab;
    }
    model.forward(tokens.data(), targets.data(), 1.0f / float(n));
    model.backward();
  }
  const size_t held = cpu_scratch_held_bytes();
  const size_t predicted = cpu_scratch_bytes(
      gpt_cpu_scratch_shapes(shape, B, 1, shape.n_layer, true, compute, omp_get_max_threads()));
  release_all_scratch();
  return {held, predicted};
}

}  // namespace

TEST_CASE("CPU scratch of a 16-bit model equals what loom plan predicts for it") {
  // B x heads = 8 (attention's loops): on more threads than that, the ones past it ask nothing,
  // which the prediction counts too; B x T = 64 rows.
  const GptShape shape = GptShape::make(2, 4, 64, 300, 32);
  const int B = 2;
  for (const char* mode : {static_cast<const char*>(nullptr), "reference"}) {
    MatmulMode m(mode);
    for (DType compute : {DType::bf16, DType::f16}) {
      const auto [held, predicted] = run_and_predict(shape, B, compute);
      INFO("LOOM_CPU_MATMUL=" << (mode ? mode : "(unset)") << ", " << dtype_name(compute) << ", "
                              << omp_get_max_threads() << " threads");
      CHECK(held > 0);  // every 16-bit path widens something (rows of LayerNorm at least)
      CHECK(held == predicted);
    }
  }
  SECTION("fp32 keeps none") {
    const auto [held, predicted] = run_and_predict(shape, B, DType::f32);
    CHECK(held == 0);
    CHECK(predicted == 0);
  }
}

TEST_CASE("CPU scratch on more threads than attention has heads x batch equals the prediction") {
  // 12 threads, 8 (batch, head) pairs: threads 8-11 widen LayerNorm rows but no attention head.
  const GptShape shape = GptShape::make(2, 4, 64, 300, 32);
  const int before = omp_get_max_threads();
  omp_set_num_threads(12);
  MatmulMode m("reference");
  const auto [held, predicted] = run_and_predict(shape, 2, DType::f16);
  omp_set_num_threads(before);
  CHECK(held > 0);
  CHECK(held == predicted);
}

TEST_CASE("CPU scratch with LoRA adapters equals the prediction") {
  GptShape shape = GptShape::make(2, 4, 64, 300, 32);
  shape.lora.rank = 8;
  MatmulMode m("reference");  // every linear widens, adapters included
  const auto [held, predicted] = run_and_predict(shape, 2, DType::bf16);
  CHECK(held > 0);
  CHECK(held == predicted);
}

TEST_CASE("CPU scratch of widened linears is their largest rows x columns per slot") {
  // Against the arithmetic by hand: with LOOM_CPU_MATMUL=reference one bf16 layer (N, C) -> (N, OC)
  // keeps its output, input and weight widened, and the backward's input gradient: 4 bytes each.
  MatmulMode m("reference");
  CpuScratchShapes s;
  s.compute = DType::bf16;
  s.rows = 512;
  s.linears = {{384, 1536}};
  const size_t N = 512, C = 384, OC = 1536;
  CHECK(cpu_scratch_bytes(s) == 4 * (N * OC + N * C + OC * C + N * C));
  s.compute = DType::f32;
  CHECK(cpu_scratch_bytes(s) == 0);
}
