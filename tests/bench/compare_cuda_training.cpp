// A short training run of the tiny GPT (configs/tiny.yaml's shape: L 4, NH 4, C 128, byte
// vocabulary 257, T 64, micro-batch 8) on the CPU backend (fp32) and the CUDA backend (fp32 and
// bf16), side by side from the same initial weights on the same batches: the model, AdamW, the
// gradient clipping and the warmup+cosine schedule of a real run, without MPI or the trainer
// (so it builds on a bare GPU machine, next to test_cuda_ops). Run by hand on a GPU (or by
// scripts/gpu_check.sh): it exits 1 unless, over the first 50 steps, the fp32 losses agree within
// 1e-4 relative and the bf16 ones within 1e-2 (the table shows later steps too).
// The peak learning rate is 1e-3, not tiny.yaml's 3e-3: at 3e-3 this 50-step run is chaotic (the
// loss climbs after step 30), and with head size 64 the CPU run differed from itself by 1.2e-3
// when its initial weights moved by 1e-7 relative; at 1e-3 by 1.4e-8. That is measured here every
// time (the "cpu self" column: the CPU run again from weights scaled by 1 + 1e-7 sin(i)), so a
// failure can be told apart from an amplifying schedule.
//   build-gpu/tests/compare_cuda_training [text file, bytes as tokens] [steps] [full|lora|qlora] [heads]
// lora: rank-8 adapters on every linear layer with dropout 0.1, the base frozen (random); qlora:
// the same with the base's block weights in NF4. heads: 4 by default (head size 32, the row
// attention kernels); 2 gives head size 64, the tiled flash-attention kernels. Afterwards, the KV-cache decoder (`loom sample`'s)
// on both backends from the same weights: its logits per step and its greedy tokens.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <iterator>
#include <memory>
#include <string>
#include <vector>

#include "engine/model/gpt.hpp"
#include "engine/model/gpt_decoder.hpp"
#include "engine/model/param_table.hpp"
#include "engine/optim/adamw.hpp"
#include "engine/optim/lr_schedule.hpp"
#include "kernels/backend.hpp"
#include "kernels/cuda/cuda_backend.hpp"
#include "kernels/cuda/cuda_probe.hpp"

using namespace loom;

namespace {

constexpr double kPeakLr = 1e-3;

struct Run {
  std::string name;
  std::vector<double> loss, norm;
  std::vector<float> final_params;
  double seconds = 0;
};

Run train(const std::string& name, Backend& be, DType dtype, const GptShape& shape, int B,
          const std::vector<float>& init, const std::vector<float>& frozen, const std::vector<uint8_t>& text,
          int steps) {
  Run r{name, {}, {}, {}, 0};
  const int T = shape.seq_len;
  Gpt model(be, shape, B, {}, {}, 1, Recompute::None, dtype);
  model.set_params(init.data());
  model.set_frozen(frozen.data());
  AdamW opt(be, model.table(), AdamWHyper{0.9, 0.95, 1e-8, 0.1});
  const LrSchedule sched{kPeakLr, kPeakLr / 10, 20, steps};
  std::vector<int32_t> tokens(size_t(B) * T), targets(size_t(B) * T);
  const size_t span = text.size() - size_t(T) - 1;
  const auto t0 = std::chrono::steady_clock::now();
  for (int s = 0; s < steps; ++s) {
    for (int b = 0; b < B; ++b) {  // the same windows for every backend
      const size_t start = (size_t(s) * B + size_t(b)) * 7919 % span;
      for (int t = 0; t < T; ++t) {
        tokens[size_t(b) * T + t] = text[start + t];
        targets[size_t(b) * T + t] = text[start + t + 1];
      }
    }
    model.zero_grads();
    model.set_dropout_seed(0, uint64_t(s) + 1);
    const double loss = model.forward(tokens.data(), targets.data(), 1.0f / float(B * T));
    model.backward();
    const double norm = clip_grad_norm(be, model.grads(), model.num_params(), 1.0);
    opt.step(model.params(), model.grads(), sched.at(s), s + 1);
    model.sync_compute_weights();
    r.loss.push_back(loss);
    r.norm.push_back(norm);
  }
  be.synchronize();
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  r.final_params.resize(model.num_params());
  model.get_params(r.final_params.data());
  return r;
}

}  // namespace

int main(int argc, char** argv) {
  const cuda::DeviceProbe probe = cuda::probe_devices();
  if (probe.count == 0) {
    std::printf("compare_cuda_training: no usable CUDA device (%s)\n", probe.reason.c_str());
    return 77;
  }
  std::printf("device: %s\n", probe.names.c_str());
  const std::string path = argc > 1 ? argv[1] : "README.md";
  const int steps = argc > 2 ? std::max(1, std::atoi(argv[2])) : 100;
  std::ifstream in(path, std::ios::binary);
  std::vector<uint8_t> text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const std::string mode = argc > 3 ? argv[3] : "full";
  const int heads = argc > 4 ? std::atoi(argv[4]) : 4;
  if (heads <= 0 || 128 % heads != 0) {
    std::printf("compare_cuda_training: heads must divide 128\n");
    return 2;
  }
  GptShape shape = GptShape::make(4, heads, 128, 257, 64);
  if (mode == "lora" || mode == "qlora") {
    shape.lora.rank = 8;
    shape.lora.dropout = 0.1f;
    shape.lora.quantize = mode == "qlora" ? 2 : 0;
  }
  std::printf("mode %s\n", mode.c_str());
  const int B = 8;
  if (text.size() < size_t(shape.seq_len) + 2) {
    std::printf("compare_cuda_training: %s has too few bytes\n", path.c_str());
    return 2;
  }
  std::printf("text %s: %zu bytes; L 4, NH %d, C 128, V 257, T 64, B 8; %d steps, lr %g warmup 20 cosine\n",
              path.c_str(), text.size(), heads, steps, kPeakLr);
  const ParamTable table = gpt_param_table(shape);
  std::vector<float> init(table.total());
  init_params(table, shape, 1337, init.data());
  const ParamTable frozen_table = gpt_param_table(shape, 0, 1, {}, ParamSet::Frozen);
  std::vector<float> frozen(frozen_table.total());
  init_params(frozen_table, shape, 7, frozen.data());

  auto cpu = make_cpu_backend();
  auto gpu = make_cuda_backend(0);
  std::vector<Run> runs;
  runs.push_back(train("cpu fp32", *cpu, DType::f32, shape, B, init, frozen, text, steps));
  runs.push_back(train("cuda fp32", *gpu, DType::f32, shape, B, init, frozen, text, steps));
  runs.push_back(train("cuda bf16", *gpu, DType::bf16, shape, B, init, frozen, text, steps));
  std::vector<float> nudged(init);
  for (size_t i = 0; i < nudged.size(); ++i) nudged[i] *= float(1.0 + 1e-7 * std::sin(double(i)));
  const Run self = train("cpu nudged", *cpu, DType::f32, shape, B, nudged, frozen, text, steps);

  std::printf("%6s", "step");
  for (const Run& r : runs) std::printf(" %14s", (r.name + " loss").c_str());
  std::printf(" %12s %12s %12s %12s\n", "fp32 rel", "bf16 rel", "norm rel", "cpu self");
  double worst32 = 0, worst16 = 0, worst32_first50 = 0, worst16_first50 = 0, worst_self = 0;
  for (int s = 0; s < steps; ++s) {
    const double ref = runs[0].loss[size_t(s)];
    const double d32 = std::fabs(runs[1].loss[size_t(s)] - ref) / std::fabs(ref);
    const double d16 = std::fabs(runs[2].loss[size_t(s)] - ref) / std::fabs(ref);
    const double dn = std::fabs(runs[1].norm[size_t(s)] - runs[0].norm[size_t(s)]) / std::fabs(runs[0].norm[size_t(s)]);
    const double dself = std::fabs(self.loss[size_t(s)] - ref) / std::fabs(ref);
    worst32 = std::max(worst32, d32);
    worst16 = std::max(worst16, d16);
    worst_self = std::max(worst_self, dself);
    if (s < 50) worst32_first50 = std::max(worst32_first50, d32), worst16_first50 = std::max(worst16_first50, d16);
    if (s < 5 || s % 10 == 9 || s == steps - 1) {
      std::printf("%6d", s + 1);
      for (const Run& r : runs) std::printf(" %14.6f", r.loss[size_t(s)]);
      std::printf(" %12.3e %12.3e %12.3e %12.3e\n", d32, d16, dn, dself);
    }
  }
  double pmax = 0, pdiff = 0;
  for (size_t i = 0; i < init.size(); ++i) {
    pmax = std::max(pmax, double(std::fabs(runs[0].final_params[i])));
    pdiff = std::max(pdiff, double(std::fabs(runs[1].final_params[i] - runs[0].final_params[i])));
  }
  std::printf("worst loss difference vs cpu fp32: cuda fp32 %.3e, cuda bf16 %.3e, cpu nudged by 1e-7 %.3e (relative)\n",
              worst32, worst16, worst_self);
  std::printf("final parameters, cuda fp32 vs cpu fp32: max |diff| %.3e (max |param| %.3e)\n", pdiff, pmax);
  for (const Run& r : runs) std::printf("%-10s %8.3f s for %d steps (%.2f ms/step)\n", r.name.c_str(), r.seconds, steps, 1e3 * r.seconds / steps);
  // The KV-cache decoder on both backends, from the same (plain GPT) weights: a 16-byte prompt,
  // then 48 greedy tokens chosen on the CPU and fed to both.
  {
    const GptShape plain = GptShape::make(4, 4, 128, 257, 64);
    const ParamTable pt = gpt_param_table(plain);
    std::vector<float> w(pt.total());
    init_params(pt, plain, 1337, w.data());
    for (size_t i = 0; i < w.size(); ++i) w[i] += 0.05f * std::sin(float(i));  // past the init's near-uniform logits
    GptDecoder dc(*cpu, plain, TensorParallel{}, 1), dg(*gpu, plain, TensorParallel{}, 1);
    dc.set_params(w.data());
    dg.set_params(w.data());
    std::vector<int32_t> prompt(text.begin(), text.begin() + 16);
    std::vector<float> lc = dc.step(prompt.data(), 16, true), lg = dg.step(prompt.data(), 16, true);
    double worst = 0, scale = 0;
    int same = 0;
    for (int t = 0; t < 48; ++t) {
      for (size_t i = lc.size() - 257; i < lc.size(); ++i)
        worst = std::max(worst, double(std::fabs(lc[i] - lg[i]))), scale = std::max(scale, double(std::fabs(lc[i])));
      const int32_t nc = int32_t(std::max_element(lc.end() - 257, lc.end()) - (lc.end() - 257));
      const int32_t ng = int32_t(std::max_element(lg.end() - 257, lg.end()) - (lg.end() - 257));
      same += nc == ng;
      lc = dc.step(&nc, 1);
      lg = dg.step(&nc, 1);
    }
    std::printf("KV-cache decoder, cuda fp32 vs cpu fp32, 16-token prompt + 48 steps: max |logit diff| %.3e (max |logit| "
                "%.3e); greedy token equal at %d of 48 steps\n",
                worst, scale, same);
  }
  const bool finite = std::all_of(runs.begin(), runs.end(), [](const Run& r) {
    return std::all_of(r.loss.begin(), r.loss.end(), [](double x) { return std::isfinite(x); });
  });
  // The criterion for the CUDA backend in fp32: 50 steps within 1e-4 (relative) of the
  // CPU's losses; bf16 within 1e-2 (the CPU's own bf16 run is within 6e-4 of its fp32 one here).
  // Later steps may drift further (summation orders compound); they are printed.
  const bool close = worst32_first50 <= 1e-4 && worst16_first50 <= 1e-2;
  if (worst_self > 1e-5)
    std::printf("note: the CPU run moved %.3e from a 1e-7 change of its initial weights: this schedule amplifies "
                "rounding, so the criterion below tests it more than the kernels\n",
                worst_self);
  std::printf("%s: over the first %d steps, cuda fp32 loss within %.3e of cpu fp32 (criterion 1e-4), cuda bf16 "
              "within %.3e (criterion 1e-2)%s\n",
              close ? "PASS" : "FAIL", std::min(steps, 50), worst32_first50, worst16_first50,
              finite ? "" : "; a loss is not finite");
  return finite && close ? 0 : 1;
}
