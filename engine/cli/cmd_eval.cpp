// `loom eval SRC --data DIR`: a model's loss and perplexity on a token dataset (a `loom prep`
// directory or any format data.train takes): the first --batches batches of the split, drawn as
// validation batches are (a fixed, seed-independent order), so two models evaluated with the same
// arguments see the same tokens. `loom eval SRC --choices FILE`: its accuracy on multiple-choice
// items (HellaSwag, MMLU in llm.c's eval files; engine/train/choice_scoring.hpp). Under mpirun
// the ranks split the batches or the items (data parallel).
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>

#include "engine/cli/agreed_step.hpp"
#include "engine/cli/commands.hpp"
#include "engine/cli/model_tokenizer.hpp"
#include "engine/data/choice_items.hpp"
#include "engine/data/data_loader.hpp"
#include "engine/data/sampler.hpp"
#include "engine/data/token_dataset.hpp"
#include "engine/model/gpt.hpp"
#include "engine/model/gpt_memory.hpp"
#include "engine/model/param_table.hpp"
#include "engine/pretrained/load_pretrained.hpp"
#include "engine/train/cpu_threads.hpp"
#include "engine/train/choice_scoring.hpp"
#include "engine/train/evaluation.hpp"
#include "engine/train/one_rank_per_gpu.hpp"
#include "engine/train/same_data.hpp"
#include "engine/util/atomic_file.hpp"
#include "engine/util/memory_room.hpp"
#include "kernels/backend_factory.hpp"
#include "parallel/host_collectives.hpp"
#include "parallel/mpi_world.hpp"
#include "parallel/process_groups.hpp"

namespace loom::cli {
namespace {

// The CPU backend's memory for evaluating: the parameters (and the gradient buffer the model
// keeps), their host copy while loading, the activations of one --micro-batch and the batches'
// token ids, with a 10% margin (the tiny model at 4000 x 32 tokens: 3.03 GB predicted, 3.20 GB
// peak); "" when `ranks` of it fit `room`, else why not, with the change that helps most. (A
// micro-batch too large for the node was killed by the kernel, with SIGKILL and no word.)
std::string eval_memory_refusal(const GptShape& shape, int B, const Backend& be, size_t batch_bytes, int ranks,
                                const MemoryRoom& room) {
  if (!room.known()) return "";
  const double mb = 1e6;
  const double params = 3.0 * 4 * double(gpt_param_table(shape).total()) / mb;
  const double acts = double(gpt_activation_bytes(shape, B, 1, shape.n_layer, true, 1,
                                                  be.attention_saved_bytes(B, shape.seq_len, shape.n_head, DType::f32),
                                                  4)
                                 .total(1)) / mb;
  const double batches = double(batch_bytes) / mb;
  const double need = 1.1 * ranks * (params + acts + batches);
  if (need <= room.mb) return "";
  char b[512];
  std::snprintf(b, sizeof b, "out of memory before evaluating: %d rank(s) on this node need %.0f MB with a 10%% margin "
                "(per rank: parameters, their gradient buffer and host copy %.0f MB, activations of --micro-batch %d x "
                "%d tokens %.0f MB, the batches' token ids %.0f MB); ", ranks, need, params, B, shape.seq_len, acts,
                batches);
  const std::string fix =
      acts >= params && acts >= batches ? "lower --micro-batch (sequences per forward: the loss does not depend on it)"
      : batches >= params               ? "lower --batches or --micro-batch"
                                        : "run fewer ranks on this node (the model alone does not fit so many times)";
  return b + room.where + "; " + fix;
}

// --choices: the items, checked as log.choices' are (open_choice_items); --items-out must be a
// new file (an evaluation never overwrites what is there).
void open_choices(const EvalArgs& a, const PretrainedSource& src, int T, std::vector<ChoiceItem>& items) {
  items = open_choice_items(a.choices, "--choices", src.model().vocab_size, T, a.limit,
                            [&] { return make_model_tokenizer(src, a.tokenizer, a.vocab, a.merges, ""); });
  if (!a.items_out.empty() && std::filesystem::exists(a.items_out))
    throw std::runtime_error("--items-out " + a.items_out + " exists: loom eval does not overwrite it (remove it, or "
                             "name a new file)");
}

void report_choices(const EvalArgs& a, const PretrainedSource& src, int T, const std::vector<ChoiceScore>& scores,
                    std::chrono::steady_clock::duration took) {
  const ChoiceTally t = tally_choices(scores);
  if (!a.items_out.empty()) write_file_atomically(a.items_out, choice_scores_jsonl(scores), "--items-out");
  char cut_note[160] = "";
  if (t.cut > 0)
    std::snprintf(cut_note, sizeof cut_note, "; %zu item(s) lost context tokens on the left to fit %d positions", t.cut, T);
  std::printf("loom eval: %s on %s: %zu multiple-choice items (%.3g endings each): acc %.4f (%zu right, least total "
              "loss), acc_norm %.4f (%zu right, least loss per token)%s%s%s (%.2f s)\n",
              src.path().c_str(), a.choices.c_str(), t.items, double(t.endings) / double(t.items), t.acc(), t.right,
              t.acc_norm(), t.right_norm, cut_note, a.items_out.empty() ? "" : "; each item in ", a.items_out.c_str(),
              std::chrono::duration<double>(took).count());
}

}  // namespace

int cmd_eval(const EvalArgs& a, int* argc, char*** argv) {
  parallel::MpiWorld world(argc, argv);
  const bool lead = world.rank() == 0;
  const auto t0 = std::chrono::steady_clock::now();
  std::unique_ptr<PretrainedSource> src;
  std::unique_ptr<parallel::ProcessGroups> groups;
  std::unique_ptr<Backend> backend;
  std::unique_ptr<Gpt> model;
  std::vector<StepBatch> batches;
  TokenDataset data;
  DataFingerprint print;  // of this rank's copy of --data
  int T = 0, device = 0;
  uint64_t samples = 0;  // in the split: more asked for than it holds come round again
  bool blend = false;
  const bool choices = !a.choices.empty();
  std::vector<ChoiceItem> items;  // --choices
  const int dp = world.size();
  // OpenMP threads: each rank's share of its node's cores unless OMP_NUM_THREADS says; before
  // anything runs OpenMP code (the data's and the model's checks). Collective on every rank.
  if (const std::string note = settle_cpu_threads(world, a.backend == "cpu").note; lead && !note.empty())
    std::fprintf(stderr, "%s\n", note.c_str());
  // What each rank opens on its own, then the process groups (collective), then the rest: a rank
  // that fails alone (a node without the file system) ends every rank (agreed_step.hpp).
  if (!agreed_step(world, "eval", [&] {
        src = open_pretrained(a.src, a.base);
        const ModelConfig& m = src->model();
        T = a.seq_len > 0 ? a.seq_len : m.seq_len;
        if (T > m.seq_len)
          throw std::runtime_error("--seq-len " + std::to_string(T) + " is past the model's " +
                                   std::to_string(m.seq_len) + " positions");
        if (choices) {
          open_choices(a, *src, T, items);
          return;
        }
        if (a.batches % dp != 0)
          throw std::runtime_error("--batches " + std::to_string(a.batches) + " is not a multiple of the " +
                                   std::to_string(dp) + " ranks");
        data = open_dataset(a.data, "auto", "--data", a.split);
        print = validate_dataset(data, m.vocab_size, T, "--data");
        // The distinct sequences among those asked (a blend's small part repeats before the whole).
        const SampleIndex index(data, T);
        samples = index.distinct_in_order(uint64_t(a.batches) * uint64_t(a.micro_batch));
        blend = !index.parts().empty();
      }))
    return 2;
  if (!agreed_step(world, "eval", [&] {
        groups = std::make_unique<parallel::ProcessGroups>(world.comm(), parallel::GridLayout{1, dp, 1});
      }))
    return 2;
  // What this node may still take, read by every rank before the collective below, so before any
  // allocates the batches or the model.
  const MemoryRoom room = a.backend == "cpu" ? memory_room() : MemoryRoom{};
  // Every rank must evaluate the same tokens (same_data.hpp). Collective, then agreed.
  const std::string differs =
      choices ? data_differs_from_rank0(groups->world(), "--choices=" + a.choices, choice_items_fingerprint(items),
                                        "multiple-choice items")
              : data_differs_from_rank0(groups->world(), "--data=" + a.data, print, "evaluation data");
  if (!agreed_step(world, "eval", [&] {
        if (!differs.empty()) throw std::runtime_error(differs);
      }))
    return 2;
  if (!agreed_step(world, "eval", [&] {
        device = a.backend == "cuda" ? cuda_device_for_local_rank(groups->local_rank()) : 0;
        backend = make_backend(a.backend, device, "--backend");
        // Memory before anything large: the batches alone hold --micro-batch x --batches sequences.
        const ModelConfig& m = src->model();
        const GptShape shape = GptShape::make(m.n_layer, m.n_head, m.d_model, m.vocab_size, T);
        const size_t batch_bytes =
            choices ? 0 : size_t(a.batches / dp) * size_t(a.micro_batch) * size_t(T) * 2 * sizeof(int32_t);
        if (std::string no = eval_memory_refusal(shape, a.micro_batch, *backend, batch_bytes, groups->local_size(), room);
            !no.empty())
          throw std::runtime_error(no);
        // Rank r takes batches r, r + dp, ...: validation_batches deals them out by dp rank.
        const LoaderLayout layout{T, a.micro_batch, 1, groups->coord().dp, dp, 0};
        if (!choices) batches = validation_batches(data, layout, a.batches / dp);
      }))
    return 2;
  if (!agreed_step(world, "eval", [&] {
        use_device_communicators(*groups, *backend, device);
        const ModelConfig& m = src->model();
        const GptShape shape = GptShape::make(m.n_layer, m.n_head, m.d_model, m.vocab_size, T);
        model = std::make_unique<Gpt>(*backend, shape, a.micro_batch);
        std::vector<float> host(model->num_params());
        load_pretrained(model->table(), shape, *src, host.data());
        model->set_params(host.data());
      }))
    return 2;
  try {
    if (choices) {
      const auto scores = gather_choice_scores(groups->world(), score_choices(*model, *groups, items));
      if (lead) report_choices(a, *src, T, scores, std::chrono::steady_clock::now() - t0);
      return 0;
    }
    const double loss = evaluate(*model, *groups, batches, 1);
    const double sec = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (lead) {
      // The split's name only where the data has splits (a `loom prep` directory); the sequences
      // as asked, and how many distinct ones the data held when fewer.
      const bool has_splits = data.format == "loom" && std::filesystem::is_directory(a.data);
      const uint64_t asked = uint64_t(a.batches) * uint64_t(a.micro_batch);
      char repeat[160] = "";
      if (asked > samples)
        std::snprintf(repeat, sizeof repeat,
                      blend ? ", %llu distinct: the blend's smaller parts come round before the whole, so some repeat"
                            : ", %llu distinct: the data holds no more, so they repeat",
                      (unsigned long long)samples);
      std::printf("loom eval: %s on %s%s%s%s: loss %.6f nats/token, perplexity %.4f, over %llu sequences of %d "
                  "tokens%s (%.2f s)\n",
                  src->path().c_str(), a.data.c_str(), has_splits ? " (" : "", has_splits ? a.split.c_str() : "",
                  has_splits ? " split)" : "", loss, std::exp(loss), (unsigned long long)asked, T, repeat, sec);
    }
    return 0;
  } catch (const std::exception& e) {
    world.abort(std::string("loom eval: ") + e.what(), 1);
  }
  return 1;
}

}  // namespace loom::cli
