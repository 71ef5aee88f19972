// Recipe loading: every malformed recipe or override gets an error naming the file (or the
// --set), the line where there is one, the key and what was expected.
#include <catch2/catch.hpp>

#include <cstdio>
#include <filesystem>
#include <fstream>

#include "engine/config/recipe_io.hpp"

using loom::ConfigError;
using loom::load_recipe;
using loom::Recipe;
using loom::resolve_world;
using Catch::Matchers::Contains;

namespace {

// Writes `text` to a fresh file in the test's temp dir and returns its path.
std::string write_recipe(const std::string& name, const std::string& text) {
  auto dir = std::filesystem::temp_directory_path() / "loom_test_recipe";
  std::filesystem::create_directories(dir);
  auto path = (dir / name).string();
  std::ofstream(path) << text;
  return path;
}

// The error message of loading (and resolving for `world` ranks), or "" if it succeeded.
std::string error_of(const std::string& path, std::vector<std::string> sets = {}, int world = 1) {
  try {
    Recipe r = load_recipe(path, sets);
    resolve_world(r, world);
  } catch (const ConfigError& e) {
    return e.what();
  }
  return "";
}

const char* kGood = R"(model:
  n_layer: 4
  n_head: 4
  d_model: 64
  vocab_size: 256
  seq_len: 32
train:
  micro_batch: 2
  global_batch: 8
  steps: 10
)";

}  // namespace

TEST_CASE("a good recipe loads, defaults fill the rest, and overrides apply in order") {
  auto p = write_recipe("good.yaml", kGood);
  Recipe r = load_recipe(p, {"optim.lr=1e-3", "train.steps=7", "train.steps=9"});
  resolve_world(r, 2);
  CHECK(r.model.n_layer == 4);
  CHECK(r.optim.lr == 1e-3);
  CHECK(r.train.steps == 9);
  CHECK(r.parallel.dp == 2);  // auto = world / (tp*pp)
  CHECK(r.grad_accum() == 2);  // 8 / (2 * 2)
  CHECK(r.optim.beta2 == 0.95);  // default
  CHECK(r.origin.at("train.steps") == "--set train.steps=9");
  CHECK(r.origin.at("model.d_model") == p + ":4:3");
  // Document markers around the one document are fine.
  Recipe framed = load_recipe(write_recipe("framed.yaml", std::string("---\n") + kGood + "---\n"), {});
  CHECK(framed.model.n_layer == 4);
}

TEST_CASE("an override value starting with a YAML indicator is the text itself, never empty") {
  auto p = write_recipe("good_ind.yaml", kGood);
  for (const std::string v : {"%j", "&a", "!tag", "*x", "@at", "`q", "#x", "|", ">", "a #b", "'"}) {
    INFO(v);
    Recipe r = load_recipe(p, {"checkpoint.dir=" + v});
    CHECK(r.checkpoint.dir == v);
    CHECK_THROWS_WITH(load_recipe(p, {"model.n_layer=" + v}), Catch::Contains("expected an integer, got '" + v + "'"));
  }
}

TEST_CASE("the printed recipe reads back to the same recipe") {
  auto p = write_recipe("roundtrip.yaml", kGood);
  Recipe r = load_recipe(p, {"data.train=some file.txt", "optim.lr=0.0006", "checkpoint.resume=auto"});
  resolve_world(r, 1);
  auto yaml = loom::recipe_to_yaml(r);
  auto p2 = write_recipe("roundtrip2.yaml", yaml);
  Recipe r2 = load_recipe(p2);
  resolve_world(r2, 1);
  // Same YAML apart from the first comment line, which names the source file.
  auto body = [](const std::string& s) { return s.substr(s.find('\n')); };
  CHECK(body(loom::recipe_to_yaml(r2)) == body(yaml));
  CHECK(r2.data.train == "some file.txt");
  CHECK(r2.optim.lr == 0.0006);
}

TEST_CASE("malformed recipes and overrides are rejected with their place and the expectation") {
  struct Case {
    const char* name;
    std::string text;
    std::vector<std::string> sets;
    int world;
    std::vector<std::string> expect;  // substrings of the message
  };
  const std::string g = kGood;
  std::vector<Case> cases = {
      {"unknown_key", "model:\n  n_layer: 2\n  n_heads: 4\n", {}, 1,
       {"unknown_key.yaml:3:3:", "unknown key 'model.n_heads'", "did you mean 'model.n_head'?"}},
      {"key_in_wrong_section", "train:\n  lr: 1e-3\n", {}, 1,
       {":2:3:", "unknown key 'train.lr'", "did you mean 'optim.lr'?"}},
      {"unknown_section", "modle:\n  n_layer: 2\n", {}, 1,
       {":1:1:", "unknown section 'modle'", "did you mean 'model'?"}},
      {"key_at_top_level", "lr: 0.1\n", {}, 1, {"unknown section 'lr'", "did you mean 'optim.lr'?"}},
      {"two_documents", g + "---\nmodel:\n  n_layer: 3\n", {}, 1,
       {"two_documents.yaml:12:1:", "a second YAML document (after '---'): a recipe is one document"}},
      {"wrong_type_int", "model:\n  n_layer: four\n", {}, 1,
       {":2:3:", "model.n_layer: expected an integer, got 'four'"}},
      {"float_for_int", "model:\n  n_layer: 2.5\n", {}, 1, {"model.n_layer: expected an integer, got '2.5'"}},
      {"wrong_type_float", "optim:\n  lr: fast\n", {}, 1, {":2:3:", "optim.lr: expected a finite number, got 'fast'"}},
      {"list_for_scalar", "model:\n  seq_len: [1, 2]\n", {}, 1, {"model.seq_len: expected an integer, got a list"}},
      {"negative_size", "model:\n  d_model: -64\n", {}, 1,
       {":2:3:", "model.d_model: -64 is out of range; expected an integer >= 1"}},
      {"zero_layers", "model:\n  n_layer: 0\n", {}, 1, {"model.n_layer: 0 is out of range"}},
      {"negative_lr", "optim:\n  lr: -1e-3\n", {}, 1, {"optim.lr: -1e-3 is out of range; expected a value >= 0"}},
      {"beta_one", "optim:\n  beta2: 1.0\n", {}, 1, {"optim.beta2: 1.0 is out of range; expected a value in [0, 0.999999999]"}},
      {"bad_choice", "train:\n  backend: gpu\n", {}, 1,
       {":2:3:", "train.backend: 'gpu' is not one of cpu | cuda"}},
      {"bad_precision", "train:\n  precision: fp8\n", {}, 1, {"train.precision: 'fp8' is not one of fp32 | bf16 | fp16"}},
      {"heads_not_dividing", "model:\n  d_model: 100\n  n_head: 3\n", {}, 1,
       {"model.d_model=100 (", ":2:3) must be divisible by model.n_head=3 (", ":3:3)"}},
      {"tp_not_dividing_heads", g, {"parallel.tp=3"}, 3,
       {"model.n_head=4", "must be divisible by parallel.tp=3 (--set parallel.tp=3)"}},
      {"pp_not_dividing_layers", g, {"parallel.pp=3"}, 3, {"model.n_layer=4", "must be divisible by parallel.pp=3"}},
      {"bad_world_explicit_dp", g, {"parallel.dp=2"}, 3,
       {"parallel.tp=1", "x parallel.dp=2 (--set parallel.dp=2) = 2 ranks, but the world has 3"}},
      {"bad_world_auto_dp", g, {"parallel.tp=2"}, 3, {"the world has 3 ranks, not divisible by parallel.tp=2"}},
      {"global_batch_not_divisible", g, {"train.global_batch=10"}, 2,
       {"train.global_batch=10 (--set train.global_batch=10) must be a multiple of train.micro_batch=2", "dp=2 = 4"}},
      {"global_batch_vs_micro", g, {"train.global_batch=7"}, 1, {"train.global_batch=7", "must be a multiple of train.micro_batch=2"}},
      {"bad_grad_reduce_dtype", "parallel:\n  grad_reduce_dtype: fp16\n", {}, 1, {"parallel.grad_reduce_dtype: 'fp16' is not one of fp32 | bf16"}},
      {"min_lr_above_lr", "optim:\n  lr: 1e-4\n  min_lr: 1e-3\n", {}, 1, {"optim.min_lr=0.001", "must not exceed optim.lr=0.0001"}},
      {"decay_before_warmup", "optim:\n  warmup_steps: 100\n  decay_steps: 100\n", {}, 1,
       {"optim.decay_steps=100 (", ":3:3) must be above optim.warmup_steps=100 (", ":2:3): the decay runs from"}},
      {"cooldown_longer_than_decay", "optim:\n  lr_decay: wsd\n  warmup_steps: 10\n  decay_steps: 60\n  wsd_decay_steps: 51\n",
       {}, 1, {"optim.wsd_decay_steps=51 (", ") is longer than the 50 steps from optim.warmup_steps=10"}},
      {"bad_lr_decay", "optim:\n  lr_decay: cosin\n", {}, 1,
       {"optim.lr_decay: 'cosin' is not one of cosine | linear | wsd | inverse_sqrt | constant", "did you mean 'cosine'?"}},
      {"bad_wsd_shape", g, {"optim.wsd_shape=exp"}, 1, {"optim.wsd_shape: 'exp' is not one of linear | cosine | sqrt | exponential"}},
      {"yaml_syntax", "model:\n  n_layer: [1, 2\n", {}, 1, {"yaml_syntax.yaml:", "YAML syntax error"}},
      {"empty_file", "", {}, 1, {"empty_file.yaml: the recipe is empty"}},
      {"not_a_mapping", "- model\n- train\n", {}, 1, {"expected a mapping of sections"}},
      // A text file given as the recipe: one long scalar, cut short in the message (it was echoed whole).
      {"a_text_file", std::string(3000, 'w') + " and more words\n", {}, 1,
       {"expected a mapping of sections", "got '" + std::string(60, 'w') + "...' (a text of 3015 bytes)"}},
      {"section_not_mapping", "model: 12\n", {}, 1, {":1:1:", "section 'model' must be a mapping of keys, got '12'"}},
      {"duplicate_key", "model:\n  n_layer: 2\n  n_layer: 3\n", {}, 1, {":3:3:", "duplicate key 'model.n_layer'"}},
      {"override_unknown_key", g, {"train.stepz=5"}, 1,
       {"--set train.stepz=5: unknown key 'train.stepz'", "did you mean 'train.steps'?"}},
      {"override_no_equals", g, {"train.steps"}, 1, {"--set train.steps: expected section.key=value"}},
      {"override_no_section", g, {"steps=5"}, 1, {"--set steps=5: 'steps' is not a section.key name"}},
      {"override_bad_value", g, {"train.steps=abc"}, 1, {"--set train.steps=abc: train.steps: expected an integer, got 'abc'"}},
      {"override_empty_value", g, {"train.steps="}, 1, {"--set train.steps=: train.steps: expected an integer, got nothing"}},
      {"override_unknown_section", g, {"optimizer.lr=1"}, 1, {"unknown section 'optimizer'", "did you mean 'optim'?"}},
      {"bad_dp_word", "parallel:\n  dp: many\n", {}, 1, {"parallel.dp: expected an integer or 'auto', got 'many'"}},
  };
  for (const auto& c : cases) {
    SECTION(c.name) {
      auto p = write_recipe(std::string(c.name) + ".yaml", c.text);
      std::string msg = error_of(p, c.sets, c.world);
      INFO("message: " << msg);
      REQUIRE_FALSE(msg.empty());
      for (const auto& e : c.expect) CHECK_THAT(msg, Contains(e));
    }
  }
}

TEST_CASE("a missing recipe file and a directory are named") {
  CHECK_THAT(error_of("/nonexistent/recipe.yaml"), Contains("/nonexistent/recipe.yaml: recipe file not found"));
  auto dir = std::filesystem::temp_directory_path().string();
  CHECK_THAT(error_of(dir), Contains("is a directory"));
}

TEST_CASE("the key table documents every key with its default") {
  std::string t = loom::recipe_key_table();
  CHECK_THAT(t, Contains("| `optim.lr` | number | `0.0006` |"));
  CHECK_THAT(t, Contains("| `parallel.dp` | integer or auto | `auto` |"));
  CHECK_THAT(t, Contains("| `train.backend` | cpu \\| cuda | `cpu` |"));
}

TEST_CASE("an empty log.dir is refused naming the key, before the run tries to make it") {
  auto p = write_recipe("good_logdir.yaml", kGood);
  CHECK_THROWS_WITH(load_recipe(p, {"log.dir="}), Catch::Contains("log.dir= (--set log.dir=) is empty: the run directory"));
}

TEST_CASE("a constant learning rate takes any decay_steps and an explicit one is kept") {
  auto p = write_recipe("constant_lr.yaml", "optim:\n  lr_decay: constant\n  warmup_steps: 100\n  decay_steps: 50\n");
  CHECK(error_of(p).empty());
  const Recipe r = load_recipe(p, {"train.steps=400"});
  CHECK(r.decay_steps_resolved() == 50);
  CHECK(load_recipe(p, {"optim.decay_steps=auto", "train.steps=400"}).decay_steps_resolved() == 400);
}
