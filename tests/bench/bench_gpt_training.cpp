// Training throughput of one GPT on one device, without MPI or the trainer, so that it builds
// on a bare GPU machine next to test_cuda_ops (scripts/build_cuda_ops.sh). The loop is a
// single-rank training step as the trainer runs it: per micro-batch forward + backward
// (gradients accumulating), then the global gradient-norm clip, AdamW and the refresh of the
// 16-bit compute weights. Tokens are random (seeded, made before the timed steps) and copied
// from the host each micro-batch, as the data loader's are. Its yardstick is scripts/torch_gpt_cuda_bench.py at the same shape.
//
//   bench_gpt_training [--backend cuda|cpu] [--precision fp32|bf16] [--layers 12]
//       [--heads 12] [--d_model 768] [--vocab 50257] [--seq 1024] [--batch 16] [--accum 1]
//       [--steps 20] [--warmup 3] [--profile 0|1]
//
// --profile 1 wraps the backend in OpTimer (kernels/op_timer.hpp) and prints, after the timed
// steps, the time per op summed over them. OpTimer synchronises around every op, so the step
// times and tokens/s of such a run are not the unprofiled figures: run it separately.
//
// The defaults are GPT-2 124M (configs/gpt2-124m.yaml's shape and micro-batch). Prints each
// timed step, then one line:
//   loom tokens_per_s=<median> tokens_per_s_max=<best step> step_ms=<median> mfu=<median>
//        device_mem_mb=<used> precision=<p> params=<count>
// MFU counts GptShape::flops_per_token (6 N + 12 L C T, the nanoGPT/PaLM formula) against the
// backend's peak_flops for the compute dtype. device_mem_mb (CUDA only) is the device memory in
// use after the timed steps (cudaMemGetInfo: the CUDA context, cuBLASLt's workspace and any other
// process included; Loom allocates up front), comparable with the PyTorch script's device_used_mb,
// not with its max_allocated_mb (tensors only).
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "engine/model/gpt.hpp"
#include "engine/model/param_table.hpp"
#include "engine/optim/adamw.hpp"
#include "kernels/backend.hpp"
#include "kernels/op_timer.hpp"
#ifdef LOOM_BENCH_WITH_CUDA
#include "kernels/cuda/cuda_backend.hpp"
#include "kernels/cuda/cuda_probe.hpp"
#endif

using namespace loom;

namespace {

struct Options {
  std::string backend = "cuda", precision = "bf16";
  int layers = 12, heads = 12, d_model = 768, vocab = 50257, seq = 1024, batch = 16, accum = 1;
  int steps = 20, warmup = 3;
  bool profile = false;
};

[[noreturn]] void usage(const std::string& why) {
  std::fprintf(stderr,
               "bench_gpt_training: %s\nusage: bench_gpt_training [--backend cuda|cpu] [--precision fp32|bf16] "
               "[--layers N] [--heads N] [--d_model N] [--vocab N] [--seq N] [--batch N] [--accum N] [--steps N] "
               "[--warmup N] [--profile 0|1]\n",
               why.c_str());
  std::exit(2);
}

int integer(const std::string& flag, const char* value, long least) {
  char* end = nullptr;
  const long v = std::strtol(value, &end, 10);
  if (end == value || *end != '\0' || v < least || v > (1L << 30))
    usage(flag + " expects " + (least > 0 ? "a positive" : "a non-negative") + " integer, got '" + value + "'");
  return int(v);
}
int positive(const std::string& flag, const char* value) { return integer(flag, value, 1); }

Options parse(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string flag = argv[i];
    if (i + 1 >= argc) usage(flag + " needs a value");
    const char* v = argv[++i];
    if (flag == "--backend") o.backend = v;
    else if (flag == "--precision") o.precision = v;
    else if (flag == "--layers") o.layers = positive(flag, v);
    else if (flag == "--heads") o.heads = positive(flag, v);
    else if (flag == "--d_model") o.d_model = positive(flag, v);
    else if (flag == "--vocab") o.vocab = positive(flag, v);
    else if (flag == "--seq") o.seq = positive(flag, v);
    else if (flag == "--batch") o.batch = positive(flag, v);
    else if (flag == "--accum") o.accum = positive(flag, v);
    else if (flag == "--steps") o.steps = positive(flag, v);
    else if (flag == "--warmup") o.warmup = integer(flag, v, 0);
    else if (flag == "--profile") o.profile = integer(flag, v, 0) != 0;
    else usage("unknown flag " + flag);
  }
  if (o.d_model % o.heads != 0) usage("--d_model must be a multiple of --heads");
  return o;
}

DType parse_dtype(const std::string& p) {
  if (p == "fp32") return DType::f32;
  if (p == "bf16") return DType::bf16;
  // fp16 would need the trainer's dynamic loss scaling, which this loop leaves out.
  usage("--precision expects fp32 or bf16, got '" + p + "'");
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

}  // namespace

int main(int argc, char** argv) {
  const Options o = parse(argc, argv);
  const DType dtype = parse_dtype(o.precision);
  std::unique_ptr<Backend> be;
  if (o.backend == "cpu") {
    be = make_cpu_backend();
  } else if (o.backend == "cuda") {
#ifdef LOOM_BENCH_WITH_CUDA
    const cuda::DeviceProbe probe = cuda::probe_devices();
    if (probe.count == 0) {
      std::printf("bench_gpt_training: no usable CUDA device (%s)\n", probe.reason.c_str());
      return 77;
    }
    std::printf("device: %s\n", probe.names.c_str());
    be = make_cuda_backend(0);
#else
    usage("this build has no CUDA backend");
#endif
  } else {
    usage("--backend expects cuda or cpu, got '" + o.backend + "'");
  }

  OpTimer* timer = nullptr;
  if (o.profile) {
    auto wrapped = std::make_unique<OpTimer>(std::move(be));
    timer = wrapped.get();
    be = std::move(wrapped);
  }
  const GptShape shape = GptShape::make(o.layers, o.heads, o.d_model, o.vocab, o.seq);
  const ParamTable table = gpt_param_table(shape);
  std::vector<float> init(table.total());
  init_params(table, shape, 1337, init.data());
  Gpt model(*be, shape, o.batch, {}, {}, 1, Recompute::None, dtype);
  model.set_params(init.data());
  AdamW opt(*be, model.table(), AdamWHyper{0.9, 0.95, 1e-8, 0.1});

  const int T = o.seq;
  const size_t n = size_t(o.batch) * size_t(T);
  // Every micro-batch's tokens are made before the timed steps, as the trainer's loader thread
  // has them ready; the copy to the device stays in the step, as in the trainer.
  const size_t micro_batches = size_t(o.warmup + o.steps) * size_t(o.accum);
  std::vector<int32_t> tokens(micro_batches * n), targets(micro_batches * n);
  std::mt19937_64 rng(42);
  std::uniform_int_distribution<int32_t> pick(0, o.vocab - 1);
  for (size_t i = 0; i < tokens.size(); ++i) tokens[i] = pick(rng), targets[i] = pick(rng);
  const double tokens_per_step = double(n) * o.accum;
  const double peak = be->peak_flops(dtype);
  std::printf("shape: L %d, NH %d, C %d, V %d (padded %d), T %d; micro-batch %d x %d accumulated; %s on %s; "
              "%zu parameters; %.1f MFLOP per token; peak %.1f TFLOP/s\n",
              o.layers, o.heads, o.d_model, o.vocab, shape.vocab_pad, T, o.batch, o.accum, o.precision.c_str(),
              be->name().c_str(), size_t(model.num_params()), shape.flops_per_token() / 1e6, peak / 1e12);

  std::vector<double> step_s;
  double last_loss = 0;
  for (int s = 0; s < o.warmup + o.steps; ++s) {
    if (timer && s == o.warmup) timer->reset();  // the timed steps only
    be->synchronize();
    const auto t0 = std::chrono::steady_clock::now();
    model.zero_grads();
    double loss = 0;
    for (int m = 0; m < o.accum; ++m) {
      const size_t mb = size_t(s) * size_t(o.accum) + size_t(m);
      model.set_dropout_seed(0, uint64_t(mb) + 1);
      loss += model.forward(tokens.data() + mb * n, targets.data() + mb * n, 1.0f / float(tokens_per_step)) / o.accum;
      model.backward();
    }
    const double norm = clip_grad_norm(*be, model.grads(), model.num_params(), 1.0);
    opt.step(model.params(), model.grads(), 6e-4, s + 1);
    model.sync_compute_weights();
    be->synchronize();
    const double dt = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    last_loss = loss;
    if (!std::isfinite(loss) || !std::isfinite(norm)) {
      std::printf("bench_gpt_training: step %d gave loss %g, gradient norm %g\n", s + 1, loss, norm);
      return 1;
    }
    if (s >= o.warmup) {
      step_s.push_back(dt);
      std::printf("step %3d  loss %.4f  norm %.3f  %8.2f ms  %10.0f tokens/s\n", s + 1 - o.warmup, loss, norm,
                  1e3 * dt, tokens_per_step / dt);
    }
  }
  const double med = median(step_s), best = *std::min_element(step_s.begin(), step_s.end());
  const double tps = tokens_per_step / med;
  const double mfu = peak > 0 ? tps * shape.flops_per_token() / peak : 0;
  long long mem = -1;
#ifdef LOOM_BENCH_WITH_CUDA
  if (o.backend == "cuda") mem = cuda::device_memory_used_bytes();
#endif
  // A random-token model's loss starts at ~ln(V); a value far from it means a broken step.
  std::printf("final loss %.4f (ln V = %.4f)\n", last_loss, std::log(double(o.vocab)));
  if (timer) {  // no figures line: a profiled run's step times are not the benchmark's
    std::printf("ops over the %d timed steps (each op synchronised: not the unprofiled step time)\n%s", o.steps,
                timer->report().c_str());
    return 0;
  }
  std::printf("loom tokens_per_s=%.1f tokens_per_s_max=%.1f step_ms=%.3f mfu=%.4f device_mem_mb=%.1f precision=%s "
              "params=%zu\n",
              tps, tokens_per_step / best, 1e3 * med, mfu, mem >= 0 ? double(mem) / (1 << 20) : -1.0,
              o.precision.c_str(), size_t(model.num_params()));
  return 0;
}
