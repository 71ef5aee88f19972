// The rules between recipe keys (recipe_io.hpp: validate_shapes at load time, resolve_world once
// the world size is known), and what they name in their messages: each key with its value and
// where it came from.
#include <algorithm>
#include <climits>
#include <cstdint>
#include <sstream>

#include "engine/config/recipe_fields.hpp"
#include "engine/config/recipe_io.hpp"
#include "engine/config/recipe_rules.hpp"

namespace loom {
namespace {

std::string at(const Recipe& r, const std::string& key) {
  auto it = r.origin.find(key);
  return it == r.origin.end() ? "default" : it->second;
}

// "model.d_model=100 (configs/x.yaml:4:3)"
std::string kv(const Recipe& r, const std::string& key) {
  const std::string sec = key.substr(0, key.find('.'));
  const Field* f = find_field(sec, key.substr(key.find('.') + 1));
  return key + "=" + field_value_string(*f, r) + " (" + at(r, key) + ")";
}

}  // namespace

// Rules between keys that do not depend on the world size.
void validate_shapes(const Recipe& r) {
  const std::string& src = r.source;
  auto rule = [&](bool ok, const std::string& msg) {
    if (!ok) throw ConfigError(src + ": " + msg);
  };
  const auto& m = r.model;
  rule(!r.log.dir.empty(), kv(r, "log.dir") + " is empty: the run directory (metrics.jsonl, run.json) needs a path");
  rule(m.d_model % m.n_head == 0, kv(r, "model.d_model") + " must be divisible by " + kv(r, "model.n_head"));
  rule(m.n_head % r.parallel.tp == 0, kv(r, "model.n_head") + " must be divisible by " + kv(r, "parallel.tp"));
  if (r.parallel.pp_layers == "auto") {
    rule(m.n_layer % r.parallel.pp == 0, kv(r, "model.n_layer") + " must be divisible by " + kv(r, "parallel.pp") +
                                             " (or give parallel.pp_layers, e.g. \"3,5\")");
  } else {
    std::vector<int> layers;
    std::stringstream ss(r.parallel.pp_layers);
    std::string item;
    while (std::getline(ss, item, ',')) {
      int v = 0;
      rule(parse_integer(item, v) && v >= 1,
           kv(r, "parallel.pp_layers") + ": expected 'auto' or comma-separated block counts >= 1, got '" + item + "'");
      layers.push_back(v);
    }
    int sum = 0;
    for (int v : layers) sum += v;
    rule(int(layers.size()) == r.parallel.pp,
         kv(r, "parallel.pp_layers") + " lists " + std::to_string(layers.size()) + " stages but " +
             kv(r, "parallel.pp"));
    rule(sum == m.n_layer, kv(r, "parallel.pp_layers") + " adds up to " + std::to_string(sum) + " blocks but " +
                               kv(r, "model.n_layer"));
  }
  if (r.train.global_batch > 0)
    rule(r.train.global_batch % r.train.micro_batch == 0,
         kv(r, "train.global_batch") + " must be a multiple of " + kv(r, "train.micro_batch"));
  rule(r.optim.min_lr <= r.optim.lr, kv(r, "optim.min_lr") + " must not exceed " + kv(r, "optim.lr"));
  // An explicit decay end before the warmup's would skip the decay; a cooldown longer than the
  // decay phase could not fit. (Through train.steps, i.e. auto, the trainer notes both instead: a
  // short trial of a longer recipe is a fair reason.)
  if (r.optim.lr_decay != "constant" && r.optim.decay_steps > 0)
    rule(r.optim.decay_steps > r.optim.warmup_steps, kv(r, "optim.decay_steps") + " must be above " +
                                                         kv(r, "optim.warmup_steps") +
                                                         ": the decay runs from the warmup's end to decay_steps");
  if (r.optim.lr_decay == "wsd" && r.optim.decay_steps > r.optim.warmup_steps && r.optim.wsd_decay_steps > 0)
    rule(r.optim.wsd_decay_steps <= r.optim.decay_steps - r.optim.warmup_steps,
         kv(r, "optim.wsd_decay_steps") + " is longer than the " +
             std::to_string(r.optim.decay_steps - r.optim.warmup_steps) + " steps from " +
             kv(r, "optim.warmup_steps") + " to " + kv(r, "optim.decay_steps"));
  rule(r.log.eval_every == 0 || !r.data.val.empty() || r.data.val_fraction > 0 || !r.log.choices.empty(),
       kv(r, "log.eval_every") + " needs something to evaluate: set data.val or data.val_fraction (or log.choices)");
  rule(r.data.val_fraction == 0 || r.data.val.empty(),
       kv(r, "data.val_fraction") + " holds validation out of data.train, and " + kv(r, "data.val") +
           " names other validation data: set one of them");
  rule(r.log.choices.empty() || r.log.eval_every > 0,
       kv(r, "log.choices") + " is scored at every evaluation: set log.eval_every");
  if (r.lora.rank > 0) {
    std::stringstream ss(r.lora.targets);
    int n = 0;
    for (std::string item; std::getline(ss, item, ',');) {
      rule(item == "qkv" || item == "attn_proj" || item == "fc" || item == "mlp_proj",
           kv(r, "lora.targets") + ": '" + item + "' is not a target (qkv, attn_proj, fc, mlp_proj)");
      ++n;
    }
    rule(n > 0, kv(r, "lora.targets") + " names no layer");
    rule(r.lora.quant_block % 2 == 0, kv(r, "lora.quant_block") + " must be even");
  }
  rule(r.lora.quantize == "none" || r.lora.rank > 0,
       kv(r, "lora.quantize") + " quantizes a frozen base: it needs LoRA (" + kv(r, "lora.rank") + ")");
}


std::vector<int> Recipe::stage_layers() const {
  std::vector<int> out;
  if (parallel.pp_layers == "auto") {
    out.assign(size_t(parallel.pp), model.n_layer / parallel.pp);
    return out;
  }
  std::stringstream ss(parallel.pp_layers);
  std::string item;
  while (std::getline(ss, item, ',')) out.push_back(std::stoi(item));
  return out;
}

namespace {
// train.batch_policy goodput, once dp is known: bounds that accumulation can reach, and a noise
// scale the policy can read at every batch in them.
void check_goodput(const Recipe& r) {
  const std::string src = r.source + ": train.batch_policy goodput: ";
  const int unit = r.train.micro_batch * r.parallel.dp, m0 = r.global_batch_resolved();
  const int lo = r.batch_min_resolved(), hi = r.batch_max_resolved();
  for (const auto& [key, v] : {std::pair<const char*, int>{"train.batch_min", lo}, {"train.batch_max", hi}})
    if (v % unit != 0)
      throw ConfigError(src + kv(r, key) + " (" + std::to_string(v) + " sequences) must be a multiple of " +
                        kv(r, "train.micro_batch") + " x dp=" + std::to_string(r.parallel.dp) + " = " +
                        std::to_string(unit));
  if (int64_t(hi - lo) / unit > 100000)
    throw ConfigError(src + "[" + kv(r, "train.batch_min") + ", " + kv(r, "train.batch_max") + "] holds " +
                      std::to_string((int64_t(hi) - lo) / unit + 1) + " candidate batches (multiples of micro_batch x dp = " +
                      std::to_string(unit) + "); at most 100001 are weighed: narrow the bounds");
  if (r.train.steps > INT64_MAX / m0)
    throw ConfigError(src + "the budget " + kv(r, "train.steps") + " x train.global_batch (" + std::to_string(m0) +
                      ") sequences does not fit in 64 bits");
  if (!(lo <= m0 && m0 <= hi))
    throw ConfigError(src + "the bounds must hold the reference batch: " + kv(r, "train.batch_min") + " (" +
                      std::to_string(lo) + ") <= train.global_batch (" + std::to_string(m0) + ") <= " +
                      kv(r, "train.batch_max") + " (" + std::to_string(hi) + ")");
  if (!r.log.noise_scale)
    throw ConfigError(src + "it decides from the gradient noise scale: set log.noise_scale=true (" +
                      kv(r, "log.noise_scale") + ")");
  if (r.parallel.zero >= 2 && r.parallel.pp > 1)
    throw ConfigError(src + "the gradient noise scale is not measured under " + kv(r, "parallel.zero") +
                      " with pipeline stages (" + kv(r, "parallel.pp") +
                      ": the tied embedding's gradient is reduced once per step, so no rank holds a micro-batch's "
                      "alone); use zero 0 or 1, or one stage");
  if (r.parallel.dp == 1 && r.parallel.pp > 1)
    throw ConfigError(src + "with dp 1 the noise scale needs a single pipeline stage (" + kv(r, "parallel.pp") +
                      "); run with dp >= 2");
  if (r.parallel.dp == 1 && lo < 2 * r.train.micro_batch)
    throw ConfigError(src + "on one data-parallel rank the noise scale compares the first micro-batch with the "
                      "whole batch, so every batch needs 2 micro-batches or more: " + kv(r, "train.batch_min") +
                      " resolves to " + std::to_string(lo) + ", below 2 x " + kv(r, "train.micro_batch"));
}
}  // namespace

void resolve_world(Recipe& r, int world) {
  auto& p = r.parallel;
  const std::string src = r.source;
  // Every caller passes a launcher's or a user's number: 0 or less would divide by zero below.
  if (world < 1)
    throw ConfigError(src + ": the world must have at least 1 rank, not " + std::to_string(world));
  r.world = world;
  const int model_ranks = p.tp * p.pp;
  if (p.tp < 1 || p.pp < 1 || p.dp < 0)
    throw ConfigError(src + ": " + kv(r, "parallel.tp") + ", " + kv(r, "parallel.pp") + " and " + kv(r, "parallel.dp") +
                      " must be at least 1 (dp: or auto)");
  if (p.dp == 0) {
    if (world % model_ranks != 0)
      throw ConfigError(src + ": the world has " + std::to_string(world) + " ranks, not divisible by " +
                        kv(r, "parallel.tp") + " x " + kv(r, "parallel.pp") + " = " + std::to_string(model_ranks) +
                        " (parallel.dp=auto)");
    p.dp = world / model_ranks;
  } else if (int64_t(p.tp) * p.pp * p.dp != world) {
    throw ConfigError(src + ": " + kv(r, "parallel.tp") + " x " + kv(r, "parallel.pp") + " x " + kv(r, "parallel.dp") +
                      " = " + std::to_string(int64_t(p.tp) * p.pp * p.dp) + " ranks, but the world has " +
                      std::to_string(world) + " (set parallel.dp=auto to fill the world)");
  }
  // Sequences per micro-step across the data-parallel ranks: an int everywhere after this.
  const int64_t per_step = int64_t(r.train.micro_batch) * p.dp;
  if (per_step > INT32_MAX)
    throw ConfigError(src + ": " + kv(r, "train.micro_batch") + " x dp=" + std::to_string(p.dp) + " = " +
                      std::to_string(per_step) + " sequences per micro-step, more than 2^31 - 1");
  if (r.train.global_batch > 0 && r.train.global_batch % per_step != 0)
    throw ConfigError(src + ": " + kv(r, "train.global_batch") + " must be a multiple of " + kv(r, "train.micro_batch") +
                      " x dp=" + std::to_string(p.dp) + " = " + std::to_string(per_step));
  if (r.goodput()) check_goodput(r);
}

}  // namespace loom
