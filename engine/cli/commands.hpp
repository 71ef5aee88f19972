#pragma once
// The `loom` subcommands. Each returns the process exit status: 0 success, 2 bad input
// (recipe, arguments, missing files), 1 failure during a run.
#include <string>
#include <vector>

#include "engine/data/prep.hpp"

namespace loom::cli {

using loom::PrepOptions;

struct RecipeArgs {
  std::string recipe;
  std::vector<std::string> sets;  // --set section.key=value, in order
};

int cmd_train(const RecipeArgs& a, int* argc, char*** argv);
int cmd_config(const RecipeArgs& a, int world, bool keys);
// dtype: "fp32" (sgemm) or "bf16" (the CPU backend's bf16 matmul).
int cmd_bench_gemm(int n, int reps, const std::string& dtype);
int cmd_prep(const PrepOptions& o);

struct CommBenchArgs {
  std::string backend = "mpi";  // mpi | nccl
  size_t min_bytes = 1 << 10, max_bytes = size_t(256) << 20;
  int iters = 20;
  std::string ops = "all_reduce,reduce_scatter,all_gather";
  std::string dtype = "fp32";          // fp32 | bf16 | fp16
  std::string half_reduce;              // MPI, bf16/fp16: user_op | fp32; empty: the default
  std::string algo;                     // MPI all_reduce: comma-separated auto,mpi,ring,hierarchical; empty: all
  int ranks_per_node = 0;               // hierarchical: 0 the real nodes, k > 0 pretend k ranks per node
  double link_gbps = 0;                 // > 0: a "% of link" column against this rate
  size_t segment_kib = 0;               // ring: segment size in KiB; 0: the default
  int in_flight = 0;                    // ring: segments in flight; 0: the default
};
int cmd_bench_comm(const CommBenchArgs& a, int* argc, char*** argv);
struct ImportArgs {
  std::string src, out;
};
int cmd_import(const ImportArgs& a, int* argc, char*** argv);
struct ExportArgs {
  std::string src, out;
  std::string dtype = "fp32";  // fp32 | bf16
  std::string vocab, merges;   // "" : from the checkpoint's run, if it used GPT-2 BPE
  bool peft = false;           // a LoRA checkpoint's adapters alone, in PEFT's layout (else merged)
  std::string base;            // a LoRA checkpoint's frozen base, if not at its model.base any more
};
int cmd_export(const ExportArgs& a, int* argc, char*** argv);
struct SampleArgs {
  std::string src;
  std::string base;                   // a LoRA checkpoint's frozen base, if not at its model.base any more
  std::string prompt, prompt_tokens;  // text (through the tokenizer), or comma-separated ids
  std::string tokenizer;              // "" (the model's), byte, gpt2
  std::string vocab, merges;
  int max_tokens = 64;
  int context = 0;                    // 0: the model's positions
  double temperature = 1.0, top_p = 1.0;
  int top_k = 0;
  uint64_t seed = 1337;
  bool kv_cache = true, echo_prompt = true, ignore_eot = false;
  std::string backend = "cpu", precision = "fp32";
  std::string logits_out;             // the prompt's logits, (n, V) float32
};
int cmd_sample(const SampleArgs& a, int* argc, char*** argv);
struct EvalArgs {
  std::string src, data;
  std::string choices;        // multiple-choice items instead of data (choice_items.hpp)
  std::string items_out;      // choices: per-item JSON lines
  int64_t limit = 0;          // choices: the first N items (0: all)
  std::string tokenizer, vocab, merges;  // choices in JSON lines: as loom sample's
  std::string base;           // a LoRA checkpoint's frozen base, if not at its model.base any more
  std::string split = "val";  // val | train
  int batches = 8, micro_batch = 4;
  int seq_len = 0;            // 0: the model's positions
  std::string backend = "cpu";
};
int cmd_eval(const EvalArgs& a, int* argc, char*** argv);
int cmd_ckpt_inspect(const std::string& dir, int* argc, char*** argv);

struct PlanArgs {
  RecipeArgs recipe;
  int nodes = 1, per_node = 1;
  std::string gpu = "cpu";
  bool search = false;
  int top = 20;
};
// Exit status 0; 3 if the recipe's layout does not fit in memory; 2 on bad input.
int cmd_plan(const PlanArgs& a);

}  // namespace loom::cli
