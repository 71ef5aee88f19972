// `loom import SRC --out DIR`: pretrained weights (Hugging Face GPT-2, llm.c) as a Loom checkpoint
// (step 0, zero Adam moments), verified like any other, for model.init_from or `loom export`.
// `loom export SRC --out DIR`: a Loom checkpoint (or any source) as a Hugging Face GPT-2 directory.
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>

#include "engine/checkpoint/checkpointer.hpp"
#include "engine/cli/commands.hpp"
#include "engine/cli/model_tokenizer.hpp"
#include "engine/config/recipe_io.hpp"
#include "engine/data/tokenizer.hpp"
#include "engine/pretrained/hf_gpt2_export.hpp"
#include "engine/pretrained/load_pretrained.hpp"
#include "engine/util/host_memory.hpp"
#include "kernels/backend_factory.hpp"
#include "parallel/bucket_sizing.hpp"
#include "parallel/mpi_world.hpp"
#include "parallel/process_groups.hpp"

namespace loom::cli {
namespace fs = std::filesystem;

namespace {

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace

int cmd_import(const ImportArgs& a, int* argc, char*** argv) {
  parallel::MpiWorld world(argc, argv);  // the checkpoint writer is parallel HDF5's, on one rank
  const auto t0 = std::chrono::steady_clock::now();
  try {
    if (world.size() != 1) throw std::runtime_error("loom import runs as one process (not under mpirun -n > 1)");
    std::error_code ec;
    if (fs::exists(a.out, ec) && !(fs::is_directory(a.out, ec) && fs::is_empty(a.out, ec)))
      throw std::runtime_error(a.out + ": already exists and is not empty; loom import writes a new checkpoint.dir");
    const std::unique_ptr<PretrainedSource> src = open_pretrained(a.src);
    Recipe r;
    r.model = src->model();
    r.model.init_from = a.src;
    r.world = 1;
    r.parallel.dp = 1;
    r.train.micro_batch = 1;
    r.checkpoint.dir = a.out;
    r.checkpoint.resume = "never";
    parallel::ProcessGroups groups(world.comm(), parallel::GridLayout{1, 1, 1});
    std::unique_ptr<Backend> backend = make_backend("cpu");
    const ModelConfig& m = r.model;
    const GptShape shape = GptShape::make(m.n_layer, m.n_head, m.d_model, m.vocab_size, m.seq_len);
    // One sequence, activations recomputed: the model here only carries the weights to the
    // checkpoint writer, and its activation buffers would otherwise be the largest allocation.
    Gpt model(*backend, shape, 1, TensorParallel{}, StageSpec{}, 1, Recompute::Full);
    {
      std::vector<float> host(model.num_params());
      load_pretrained(model.table(), shape, *src, host.data());
      model.set_params(host.data());
    }
    DistOptimConfig cfg;
    cfg.bucket_elems = parallel::bucket_mb_to_elems(25.0);  // (the default of 1 element makes a bucket per float)
    DistributedOptimizer optim(*backend,
                               ModelBuffers{model.params(), model.grads(), &model.table(), model.grad_ready_points(),
                                            model.units(), DType::f32},
                               groups, cfg);
    Checkpointer ck(checkpoint_setup(r), groups, model, optim);
    ck.save(0, SavedDataPosition{}, StateHealth{});
    ck.wait();
    std::printf("loom import: %s (%s: %d layers, %d heads, d_model %d, vocab %d, %d positions, %.1fM parameters) -> "
                "%s in %.2f s, peak resident memory %.0f MiB\n",
                a.src.c_str(), src->format().c_str(), m.n_layer, m.n_head, m.d_model, m.vocab_size, m.seq_len,
                model.num_params() / 1e6, a.out.c_str(), seconds_since(t0), host_memory().peak_mb);
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "loom import: error: %s\n", e.what());
    return 2;
  }
}

int cmd_export(const ExportArgs& a, int* argc, char*** argv) {
  parallel::MpiWorld world(argc, argv);  // HDF5 (a Loom checkpoint's model.h5) is the MPI build's
  const auto t0 = std::chrono::steady_clock::now();
  try {
    // Under mpirun every rank would write the same --out: one would win the rename and the others
    // fail with a confusing message.
    if (world.size() != 1) throw std::runtime_error("loom export runs as one process (not under mpirun -n > 1)");
    if (a.peft) {
      export_peft_adapters(a.src, a.out, a.base);
      std::printf("loom export: %s's LoRA adapters -> %s (PEFT: adapter_model.safetensors, adapter_config.json) in %.2f s\n",
                  a.src.c_str(), a.out.c_str(), seconds_since(t0));
      return 0;
    }
    const std::unique_ptr<PretrainedSource> src = open_pretrained(a.src, a.base);
    HfExportOptions opt;
    opt.dtype = a.dtype == "bf16" ? "BF16" : a.dtype == "fp32" ? "F32" : a.dtype;
    opt.vocab = a.vocab;
    opt.merges = a.merges;
    if (opt.vocab.empty() && opt.merges.empty()) {
      if (const ModelTokenizer t = model_tokenizer(*src); t.kind == "gpt2") {
        opt.vocab = t.vocab, opt.merges = t.merges;
        std::printf("loom export: the model's GPT-2 tokenizer: %s, %s\n", opt.vocab.c_str(), opt.merges.c_str());
      }
    }
    if (opt.vocab.empty() != opt.merges.empty())
      throw std::runtime_error("--vocab and --merges go together (GPT-2 BPE's vocab.json and merges.txt)");
    if (!opt.vocab.empty()) {
      // The files are read (so a malformed one is named now) and must fit the model: an export
      // whose tokenizer has more tokens than the model's vocabulary could not be sampled from.
      const int tokens = make_gpt2_tokenizer(opt.vocab, opt.merges)->vocab_size();
      if (tokens > src->model().vocab_size)
        throw std::runtime_error(opt.vocab + " has " + std::to_string(tokens) + " tokens, more than the model's " +
                                 std::to_string(src->model().vocab_size) +
                                 ": this is not the tokenizer the model was trained with");
    }
    export_hf_gpt2(*src, a.out, opt);
    std::printf("loom export: %s (%s) -> %s (Hugging Face GPT-2, %s%s) in %.2f s\n", src->path().c_str(),
                src->format().c_str(), a.out.c_str(), opt.dtype.c_str(),
                opt.vocab.empty() ? ", no tokenizer files" : ", with vocab.json + merges.txt", seconds_since(t0));
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "loom export: error: %s\n", e.what());
    return 2;
  }
}

}  // namespace loom::cli
