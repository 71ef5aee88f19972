// `loom sample SRC`: text from a model (a Loom checkpoint, a Hugging Face GPT-2 directory, an
// llm.c .bin) with a KV cache (GptDecoder), streamed to stdout as it is generated. Under mpirun
// the ranks form one tensor-parallel group (tp = the number of ranks): each holds its heads and
// vocabulary columns, the logits are gathered, and every rank draws the same token from the same
// seed. --no-kv-cache recomputes the whole sequence for every token (the baseline it is
// measured against, and a check: both give the same tokens).
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <sstream>

#include "engine/cli/agreed_step.hpp"
#include "engine/cli/commands.hpp"
#include "engine/cli/model_tokenizer.hpp"
#include "engine/data/tokenizer.hpp"
#include "engine/generate/token_sampler.hpp"
#include "engine/model/gpt_decoder.hpp"
#include "engine/pretrained/load_pretrained.hpp"
#include "engine/train/cpu_threads.hpp"
#include "engine/train/one_rank_per_gpu.hpp"
#include "kernels/backend_factory.hpp"
#include "parallel/mpi_world.hpp"
#include "parallel/process_groups.hpp"

namespace loom::cli {

namespace {

std::vector<int32_t> parse_ids(const std::string& list, int V) {
  std::vector<int32_t> ids;
  std::stringstream in(list);
  for (std::string item; std::getline(in, item, ',');) {
    size_t used = 0;
    long v = -1;
    try {
      v = std::stol(item, &used);
    } catch (const std::exception&) {
    }
    if (used != item.size() || v < 0 || v >= V)
      throw std::runtime_error("--prompt-tokens: '" + item + "' is not a token id in [0, " + std::to_string(V) + ")");
    ids.push_back(int32_t(v));
  }
  return ids;
}

// Before any work: `path` can be written (a file, or a new name in a directory that exists and
// can be written to), so that a long sampling does not end in an error at its last step.
void check_writable_file(const std::string& path, const char* option) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (fs::is_directory(path, ec)) throw std::runtime_error(std::string(option) + " " + path + ": is a directory");
  const fs::path dir = fs::absolute(path, ec).parent_path();
  if (!fs::is_directory(dir, ec))
    throw std::runtime_error(std::string(option) + " " + path + ": the directory " + dir.string() + " does not exist");
  const bool exists = fs::exists(path, ec);
  if (::access(exists ? path.c_str() : dir.c_str(), W_OK) != 0)
    throw std::runtime_error(std::string(option) + " " + path + ": " + (exists ? "the file" : "its directory") +
                             " cannot be written: " + std::strerror(errno));
}

}  // namespace

int cmd_sample(const SampleArgs& a, int* argc, char*** argv) {
  parallel::MpiWorld world(argc, argv);
  const bool lead = world.rank() == 0;
  std::unique_ptr<PretrainedSource> src;
  std::unique_ptr<Tokenizer> tok;
  std::unique_ptr<parallel::ProcessGroups> groups;
  std::unique_ptr<Backend> backend;
  std::unique_ptr<GptDecoder> dec;
  std::vector<int32_t> prompt;
  const int tp = world.size();
  int context = 0, device = 0;
  // OpenMP threads: each rank's share of its node's cores unless OMP_NUM_THREADS says; before
  // anything runs OpenMP code (the model's checks). Collective on every rank.
  if (const std::string note = settle_cpu_threads(world, a.backend == "cpu").note; lead && !note.empty())
    std::fprintf(stderr, "%s\n", note.c_str());
  // What each rank opens on its own, then the process groups (collective), then the rest: a rank
  // that fails alone (a node without the file system) ends every rank (agreed_step.hpp).
  std::unique_ptr<TokenSampler> sampler;
  if (!agreed_step(world, "sample", [&] {
        // The sampling options first: a bad one is refused before any weight is read.
        sampler = std::make_unique<TokenSampler>(SamplingConfig{a.temperature, a.top_k, a.top_p, a.seed});
        if (lead && !a.logits_out.empty()) check_writable_file(a.logits_out, "--logits-out");
        src = open_pretrained(a.src, a.base);
        const ModelConfig& m = src->model();
        if (m.n_head % tp != 0)
          throw std::runtime_error("tensor parallelism over " + std::to_string(tp) + " ranks: n_head = " +
                                   std::to_string(m.n_head) + " is not divisible by it");
        if (!a.prompt_tokens.empty()) {
          prompt = parse_ids(a.prompt_tokens, m.vocab_size);
        } else {
          tok = make_model_tokenizer(*src, a.tokenizer, a.vocab, a.merges, "--prompt-tokens");
          if (tok->vocab_size() > m.vocab_size)
            throw std::runtime_error("the tokenizer has " + std::to_string(tok->vocab_size()) + " tokens, the model " +
                                     std::to_string(m.vocab_size));
          std::vector<uint32_t> ids;
          tok->encode(a.prompt, ids);
          if (ids.empty()) ids.push_back(uint32_t(tok->eot_id()));  // no prompt: start a new document
          prompt.assign(ids.begin(), ids.end());
        }
        context = a.context > 0 ? a.context : m.seq_len;
        if (context > m.seq_len)
          throw std::runtime_error("--context " + std::to_string(context) + " is past the model's " +
                                   std::to_string(m.seq_len) + " positions");
        if (int(prompt.size()) > context)
          throw std::runtime_error("the prompt has " + std::to_string(prompt.size()) + " tokens, the context " +
                                   std::to_string(context));
      }))
    return 2;
  if (!agreed_step(world, "sample", [&] {
        groups = std::make_unique<parallel::ProcessGroups>(world.comm(), parallel::GridLayout{tp, 1, 1});
      }))
    return 2;
  if (!agreed_step(world, "sample", [&] {
        device = a.backend == "cuda" ? cuda_device_for_local_rank(groups->local_rank()) : 0;
        backend = make_backend(a.backend, device, "--backend");
      }))
    return 2;
  if (!agreed_step(world, "sample", [&] {
        use_device_communicators(*groups, *backend, device);
        const ModelConfig& m = src->model();
        const GptShape shape = GptShape::make(m.n_layer, m.n_head, m.d_model, m.vocab_size, context, 128 * tp);
        const DType compute = a.precision == "bf16" ? DType::bf16 : DType::f32;
        dec = std::make_unique<GptDecoder>(*backend, shape,
                                           TensorParallel{groups->coord().tp, tp, &groups->device_tp()}, 1, compute);
        std::vector<float> host(dec->table().total());
        load_pretrained(dec->table(), shape, *src, host.data());
        dec->set_params(host.data());
      }))
    return 2;

  try {
    const int V = src->model().vocab_size;
    std::vector<int32_t> seq = prompt;
    auto t0 = std::chrono::steady_clock::now();
    std::vector<float> logits = dec->step(prompt.data(), int(prompt.size()), !a.logits_out.empty());
    if (!a.logits_out.empty() && lead) {  // every prompt position's logits, (n, V) float32
      std::ofstream out(a.logits_out, std::ios::binary);
      out.write(reinterpret_cast<const char*>(logits.data()), std::streamsize(logits.size() * sizeof(float)));
      if (!out) throw std::runtime_error("--logits-out " + a.logits_out + ": cannot write: " + std::strerror(errno));
      logits.erase(logits.begin(), logits.end() - V);
    }
    if (lead && tok && a.echo_prompt)
      for (int32_t id : prompt) std::fputs(tok->decode(uint32_t(id)).c_str(), stdout);
    const double prefill_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    t0 = std::chrono::steady_clock::now();
    int generated = 0;
    std::string why = "--max-tokens";
    while (generated < a.max_tokens) {
      if (int(seq.size()) >= context) {
        why = "the full context (" + std::to_string(context) + " tokens)";
        break;
      }
      const int32_t next = sampler->next(logits.data(), V);
      seq.push_back(next);
      ++generated;
      if (lead) {
        if (tok)
          std::fputs(tok->decode(uint32_t(next)).c_str(), stdout);
        else
          std::printf("%s%d", generated > 1 ? "," : "", next);
        std::fflush(stdout);
      }
      if (tok && next == tok->eot_id() && !a.ignore_eot) {
        why = "end of text";
        break;
      }
      if (generated == a.max_tokens || int(seq.size()) >= context) continue;  // no more logits needed
      if (a.kv_cache) {
        logits = dec->step(&next, 1);
      } else {  // the baseline: the whole sequence again, from an empty cache
        dec->reset();
        logits = dec->step(seq.data(), int(seq.size()));
      }
    }
    const double gen_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (lead) {
      std::printf("\n");
      std::fprintf(stderr,
                   "loom sample: %d prompt tokens (%.3f s), %d generated in %.3f s: %.1f tokens/s (%s, tp %d, %s); "
                   "stopped on %s\n",
                   int(prompt.size()), prefill_s, generated, gen_s, gen_s > 0 ? generated / gen_s : 0.0,
                   a.kv_cache ? "KV cache" : "no KV cache: full recompute per token", tp, backend->name().c_str(),
                   why.c_str());
    }
    return 0;
  } catch (const std::exception& e) {
    world.abort(std::string("loom sample: ") + e.what(), 1);
  }
  return 1;
}

}  // namespace loom::cli
