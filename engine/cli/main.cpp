// The `loom` command line: one binary, one subcommand per job.
#include <CLI/CLI.hpp>

#include <climits>
#include <cstdio>

#include "engine/cli/commands.hpp"
#include "kernels/backend_factory.hpp"
#include "parallel/launcher_env.hpp"
#include "loom_version.hpp"

int main(int argc, char** argv) {
  using namespace loom::cli;
  CLI::App app{"loom: distributed GPT training on CPUs and GPUs. Run `loom SUBCOMMAND --help` for details."};
  // Counts, with their bounds printed as integers (CLI::PositiveNumber's are doubles: "0.000000 to 1.79e308").
  const CLI::Range kCount0(0, INT_MAX), kCount1(1, INT_MAX);
  // Seeds: 0 to 2^64 - 1 (CLI11 wraps "-1" into an unsigned option and saturates past the range).
  const CLI::Validator kSeed(
      [](std::string& v) -> std::string {
        if (v.empty() || v.size() > 20 || v.find_first_not_of("0123456789") != std::string::npos ||
            (v.size() == 20 && v > "18446744073709551615"))
          return "expected an integer from 0 to 18446744073709551615, got '" + v + "'";
        return "";
      },
      "UINT64");
  const char* kLoraBaseHelp =
      "a LoRA checkpoint's frozen base, where it is now if it moved since the run (default: the manifest's model.base; "
      "checked against the fingerprint recorded)";
  app.name("loom");
  app.require_subcommand(0, 1);
  bool version = false;
  app.add_flag("--version", version, "print the version, git commit and available backends");

  RecipeArgs train_args, config_args;
  auto add_recipe = [](CLI::App* sub, RecipeArgs& a) {
    sub->add_option("recipe", a.recipe, "YAML recipe (see docs/recipes.md)")->required();
    sub->add_option("--set", a.sets, "override a key: --set train.steps=100 (repeatable)")
        ->type_name("SECTION.KEY=VALUE")
        ->allow_extra_args(false);
  };
  CLI::App* train = app.add_subcommand("train", "train a model from a recipe (launch with mpirun/srun)");
  add_recipe(train, train_args);
  CLI::App* config = app.add_subcommand("config", "print the fully resolved recipe, defaults filled in, as YAML");
  add_recipe(config, config_args);
  int world = loom::parallel::launcher_size();
  config->add_option("--world", world, "number of ranks to resolve parallel.dp=auto for")->capture_default_str();
  bool keys = false;
  config->add_flag("--keys", keys, "print every recipe key with its type, default and meaning instead");
  config->get_option("recipe")->required(false);
  PrepOptions prep_opts;
  CLI::App* prep = app.add_subcommand(
      "prep", "tokenise text files into token shards + manifest, or --check a prepared directory (docs/data.md)");
  // Not ->required(): --check DIR needs neither; cmd_prep says what is missing. ExistingFile
  // passes a FIFO, which run_prep refuses before opening it.
  prep->add_option("files", prep_opts.inputs, "input text files")->check(CLI::ExistingFile);
  prep->add_option("--out", prep_opts.out, "output directory (must not exist or be empty, unless --force)");
  prep->add_flag("--force", prep_opts.force,
                 "replace a non-empty --out: the new dataset is written aside and swapped in once complete");
  auto* prep_check = prep->add_option("--check", prep_opts.check,
                                      "verify DIR's shards against its manifest.json (CRC-32C); exit 0 OK, 1 damaged")
                         ->type_name("DIR");
  std::vector<CLI::Option*> prep_only = {
      prep->add_option("--tokenizer", prep_opts.tokenizer, "byte (built in, vocab 257) or gpt2")
          ->check(CLI::IsMember({"byte", "gpt2"}))
          ->capture_default_str(),
      prep->add_option("--vocab", prep_opts.vocab, "GPT-2 vocab.json (with --tokenizer gpt2)"),
      prep->add_option("--merges", prep_opts.merges, "GPT-2 merges.txt (with --tokenizer gpt2)"),
      prep->add_option("--val-fraction", prep_opts.val_fraction, "fraction of documents for the val split")
          ->capture_default_str(),
      prep->add_option("--doc-separator", prep_opts.doc_separator,
                       "a line equal to this separates documents (default: each file is one document)"),
      prep->add_option("--json-key", prep_opts.json_key,
                       "the inputs are JSON lines: each line's string at this key is one document (Megatron's "
                       "--json-keys; e.g. text)"),
      prep->add_option("--shard-tokens", prep_opts.shard_tokens, "tokens per shard at most")
          ->capture_default_str()
          ->check([](const std::string& v) {
            const bool digits = !v.empty() && v.find_first_not_of("0123456789") == std::string::npos;
            return digits && v.find_first_not_of('0') != std::string::npos
                       ? std::string()
                       : "expected a positive whole number of tokens, not '" + v + "'";
          }),
      prep->add_option("--seed", prep_opts.seed, "seed of the val split")->capture_default_str()->check(kSeed)};
  prep->callback([prep_check, prep_only] {
    if (!prep_check->count()) return;
    for (auto* opt : prep_only)
      if (opt->count())
        throw CLI::ValidationError("--check DIR verifies an existing prepared directory: " + opt->get_name() +
                                   " applies to preparing one");
  });

  CLI::App* ckpt = app.add_subcommand("ckpt", "checkpoints: inspect");
  ckpt->require_subcommand(0, 1);  // none: said below (CLI11's own message hides an unknown word)
  CLI::App* inspect = ckpt->add_subcommand("inspect", "verify a checkpoint and list its tensors, layout, step and recipe");
  std::string ckpt_dir;
  inspect->add_option("dir", ckpt_dir, "a checkpoint directory, or a checkpoint.dir (its newest)")->required();

  ImportArgs import_args;
  CLI::App* import = app.add_subcommand(
      "import", "pretrained weights (a Hugging Face GPT-2 directory or an llm.c .bin) as a Loom checkpoint (step 0)");
  import->add_option("src", import_args.src, "config.json + model.safetensors directory, or llm.c gpt2_*.bin")->required();
  import->add_option("--out", import_args.out, "the checkpoint.dir to create (must not exist or be empty)")->required();
  ExportArgs export_args;
  CLI::App* exp = app.add_subcommand("export", "a checkpoint (or any model Loom reads) as a Hugging Face GPT-2 directory");
  exp->add_option("src", export_args.src, "a Loom checkpoint or checkpoint.dir (its newest), an HF directory, an llm.c .bin")
      ->required();
  exp->add_option("--out", export_args.out, "the directory to create (must not exist or be empty)")->required();
  exp->add_option("--dtype", export_args.dtype, "model.safetensors' dtype")
      ->check(CLI::IsMember({"fp32", "bf16"}))
      ->capture_default_str();
  exp->add_option("--vocab", export_args.vocab, "GPT-2 vocab.json to include (default: the run's, if it used GPT-2 BPE)");
  exp->add_option("--merges", export_args.merges, "GPT-2 merges.txt to include (with --vocab)");
  exp->add_option("--base", export_args.base, kLoraBaseHelp);
  exp->add_flag("--peft", export_args.peft,
                "a LoRA checkpoint: its adapters alone, as PEFT's adapter_model.safetensors + adapter_config.json "
                "(default: the base with the adapters merged in)");

  SampleArgs sample_args;
  CLI::App* sample = app.add_subcommand(
      "sample", "generate text from a model with a KV cache (under mpirun: tensor-parallel over the ranks)");
  sample->add_option("src", sample_args.src, "a Loom checkpoint or checkpoint.dir, an HF GPT-2 directory, an llm.c .bin")
      ->required();
  sample->add_option("--base", sample_args.base, kLoraBaseHelp);
  CLI::Option* prompt_text =
      sample->add_option("--prompt", sample_args.prompt, "text to continue (default: start a new document)");
  sample->add_option("--prompt-tokens", sample_args.prompt_tokens, "token ids to continue, comma-separated (no tokenizer)")
      ->excludes(prompt_text);
  sample->add_option("--tokenizer", sample_args.tokenizer, "byte or gpt2 (default: the model's, when Loom can tell)")
      ->check(CLI::IsMember({"byte", "gpt2"}));
  sample->add_option("--vocab", sample_args.vocab, "GPT-2 vocab.json");
  sample->add_option("--merges", sample_args.merges, "GPT-2 merges.txt");
  sample->add_option("--max-tokens", sample_args.max_tokens, "tokens to generate")->capture_default_str()->check(kCount0);
  sample->add_option("--context", sample_args.context, "positions (prompt + generated; default: the model's)")
      ->check(kCount1);
  sample->add_option("--temperature", sample_args.temperature, "softmax temperature; 0: greedy")->capture_default_str();
  sample->add_option("--top-k", sample_args.top_k, "sample among the k most likely tokens (0: all)")->capture_default_str();
  sample->add_option("--top-p", sample_args.top_p, "nucleus: the most likely tokens holding this probability")->capture_default_str();
  sample->add_option("--seed", sample_args.seed, "random seed (same seed, same text)")->capture_default_str()->check(kSeed);
  sample->add_flag("!--no-kv-cache", sample_args.kv_cache, "recompute the whole sequence for every token (baseline)");
  sample->add_flag("!--no-echo", sample_args.echo_prompt, "do not print the prompt before the continuation");
  sample->add_flag("--ignore-eot", sample_args.ignore_eot, "keep going past an end-of-text token");
  sample->add_option("--backend", sample_args.backend, "cpu or cuda")->check(CLI::IsMember({"cpu", "cuda"}))->capture_default_str();
  sample->add_option("--precision", sample_args.precision, "weights and activations dtype")
      ->check(CLI::IsMember({"fp32", "bf16"}))
      ->capture_default_str();
  sample->add_option("--logits-out", sample_args.logits_out, "write the prompt positions' logits (n x V float32) here");

  EvalArgs eval_args;
  CLI::App* eval = app.add_subcommand(
      "eval", "a model's loss and perplexity on a token dataset, or its accuracy on multiple-choice items such as "
              "HellaSwag (under mpirun: split over the ranks)");
  eval->add_option("src", eval_args.src, "a Loom checkpoint or checkpoint.dir, an HF GPT-2 directory, an llm.c .bin")->required();
  CLI::Option* eval_data =
      eval->add_option("--data", eval_args.data, "a `loom prep` directory (or token files data.train accepts)");
  eval->add_option("--choices", eval_args.choices,
                   "multiple-choice items instead of --data: HellaSwag's JSON lines, or an llm.c eval file "
                   "(hellaswag_val.bin, mmlu_val.bin); reports acc and acc_norm")
      ->excludes(eval_data);
  eval->add_option("--items-out", eval_args.items_out, "--choices: each item's losses and predictions as JSON lines (a new file)");
  eval->add_option("--limit", eval_args.limit, "--choices: only the first N items (0: all)")->capture_default_str()->check(CLI::NonNegativeNumber);
  eval->add_option("--tokenizer", eval_args.tokenizer, "--choices with JSON lines: byte or gpt2 (default: the model's)")
      ->check(CLI::IsMember({"byte", "gpt2"}));
  eval->add_option("--vocab", eval_args.vocab, "--choices with JSON lines: GPT-2 vocab.json");
  eval->add_option("--merges", eval_args.merges, "--choices with JSON lines: GPT-2 merges.txt");
  eval->add_option("--base", eval_args.base, kLoraBaseHelp);
  eval->add_option("--split", eval_args.split, "which split")->check(CLI::IsMember({"val", "train"}))->capture_default_str();
  eval->add_option("--batches", eval_args.batches, "batches of --micro-batch sequences")->capture_default_str()->check(kCount1);
  eval->add_option("--micro-batch", eval_args.micro_batch, "sequences per forward")->capture_default_str()->check(kCount1);
  eval->add_option("--seq-len", eval_args.seq_len, "tokens per sequence (default: the model's positions)")
      ->check(kCount1);
  eval->add_option("--backend", eval_args.backend, "cpu or cuda")->check(CLI::IsMember({"cpu", "cuda"}))->capture_default_str();

  PlanArgs plan_args;
  CLI::App* plan = app.add_subcommand("plan", "predict memory, FLOPs, communication and step time; --search layouts");
  add_recipe(plan, plan_args.recipe);
  plan->add_option("--nodes", plan_args.nodes, "nodes")->capture_default_str()->check(CLI::Range(1, 100000));
  plan->add_option("--gpus-per-node", plan_args.per_node, "GPUs (ranks) per node")
      ->capture_default_str()
      ->check(CLI::Range(1, 1024));
  plan->add_option("--gpu", plan_args.gpu, "device: cpu (this kind of machine), a100-40g, a100-80g, h100-80g")
      ->capture_default_str()
      ->check(CLI::IsMember({"cpu", "a100-40g", "a100-80g", "h100-80g"}));
  plan->add_flag("--search", plan_args.search, "rank every valid (tp, pp, dp, micro_batch, zero) by predicted tokens/s");
  plan->add_option("--top", plan_args.top, "rows of the --search table")->check(CLI::Range(1, 1000000))->capture_default_str();

  CLI::App* bench = app.add_subcommand("bench", "benchmarks: gemm (the CPU's sgemm rate), comm (collectives)");
  bench->require_subcommand(0, 1);  // as ckpt
  CLI::App* gemm = bench->add_subcommand("gemm", "measure the CPU's gemm GFLOP/s at fp32 or bf16 (the CPU MFU peak)");
  int gemm_n = 2048, gemm_reps = 5;
  std::string gemm_dtype = "fp32";
  CommBenchArgs comm_args;
  CLI::App* comm = bench->add_subcommand("comm", "collective bandwidth across the job (run under mpirun), nccl-tests style");
  comm->add_option("--backend", comm_args.backend, "mpi (host buffers) or nccl (device buffers)")
      ->check(CLI::IsMember({"mpi", "nccl"}))
      ->capture_default_str();
  // Sizes from 1 byte to 16 GiB: a 0 would never grow (sizes grow 4x), a huge one is an allocation failure.
  comm->add_option("--min-bytes", comm_args.min_bytes, "smallest message")
      ->check(CLI::Range(size_t(1), size_t(1) << 34))
      ->capture_default_str();
  comm->add_option("--max-bytes", comm_args.max_bytes, "largest message (sizes grow 4x)")
      ->check(CLI::Range(size_t(1), size_t(1) << 34))
      ->capture_default_str();
  comm->add_option("--iters", comm_args.iters, "timed iterations per size (fewer for large messages)")
      ->check(CLI::Range(1, 1000000))
      ->capture_default_str();
  comm->add_option("--ops", comm_args.ops, "comma-separated collectives")->capture_default_str();
  comm->add_option("--dtype", comm_args.dtype, "element type of the buffers")
      ->check(CLI::IsMember({"fp32", "bf16", "fp16"}))
      ->capture_default_str();
  comm->add_option("--half-reduce", comm_args.half_reduce,
                   "mpi, bf16/fp16: reduce with a user-defined MPI op (user_op) or through an fp32 scratch (fp32); "
                   "default: the communicator's")
      ->check(CLI::IsMember({"user_op", "fp32"}));
  comm->add_option("--algo", comm_args.algo,
                   "mpi, all_reduce and reduce_scatter: comma-separated algorithms timed side by side (auto, mpi, "
                   "ring, hierarchical: all_reduce only); default: all of them");
  comm->add_option("--ranks-per-node", comm_args.ranks_per_node,
                   "hierarchical: pretend every k consecutive ranks share a node (0: the real nodes)")
      ->capture_default_str();
  comm->add_option("--link-gbps", comm_args.link_gbps, "the link's rate in Gbit/s: adds a %link column (busbw / rate)");
  comm->add_option("--segment-kib", comm_args.segment_kib, "ring: segment size in KiB (0: the default)");
  comm->add_option("--in-flight", comm_args.in_flight, "ring: segments in flight each way (0: the default)");
  gemm->add_option("-n", gemm_n, "matrix size")->check(CLI::Range(1, 16384))->capture_default_str();
  gemm->add_option("--reps", gemm_reps, "timed repetitions")->check(CLI::Range(1, 100000))->capture_default_str();
  gemm->add_option("--dtype", gemm_dtype, "fp32 (OpenBLAS sgemm) or bf16 (the CPU backend's bf16 matmul)")
      ->check(CLI::IsMember({"fp32", "bf16"}))
      ->capture_default_str();

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    if (e.get_exit_code() == 0) return app.exit(e);  // --help
    if (loom::parallel::launcher_rank() == 0) app.exit(e);
    return 2;
  }

  if (version) {
    std::printf("loom %s (commit %s)\nbackends: %s\n", LOOM_VERSION, LOOM_GIT_COMMIT,
                loom::backend_availability().c_str());
    return 0;
  }
  // `loom ckpt` / `loom bench` alone. (With require_subcommand(1), CLI11 also answered an unknown
  // word, `loom bench foo`, with "A subcommand is required"; now the word is named as not expected.)
  for (const auto& [group, subs] : {std::pair<CLI::App*, const char*>{ckpt, "inspect"}, {bench, "gemm or comm"}})
    if (*group && group->get_subcommands().empty()) {
      if (loom::parallel::launcher_rank() == 0)
        std::fprintf(stderr, "loom %s: a subcommand is required: %s (loom %s --help)\n", group->get_name().c_str(), subs,
                     group->get_name().c_str());
      return 2;
    }
  if (*train) return cmd_train(train_args, &argc, &argv);
  if (*config) {
    if (!keys && config_args.recipe.empty()) {
      std::fprintf(stderr, "loom config: a recipe is required (or --keys)\n");
      return 2;
    }
    return cmd_config(config_args, world, keys);
  }
  if (*gemm) return cmd_bench_gemm(gemm_n, gemm_reps, gemm_dtype);
  if (*prep) return cmd_prep(prep_opts);
  if (*comm) return cmd_bench_comm(comm_args, &argc, &argv);
  if (*inspect) return cmd_ckpt_inspect(ckpt_dir, &argc, &argv);
  if (*eval) {
    if (eval_args.data.empty() && eval_args.choices.empty()) {
      if (loom::parallel::launcher_rank() == 0)
        std::fprintf(stderr, "loom eval: --data (a token dataset) or --choices (multiple-choice items) is required\n");
      return 2;
    }
    return cmd_eval(eval_args, &argc, &argv);
  }
  if (*sample) return cmd_sample(sample_args, &argc, &argv);
  if (*import) return cmd_import(import_args, &argc, &argv);
  if (*exp) return cmd_export(export_args, &argc, &argv);
  if (*plan) return cmd_plan(plan_args);
  std::printf("%s", app.help().c_str());
  return 0;
}
