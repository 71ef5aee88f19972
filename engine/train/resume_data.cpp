#include "engine/train/resume_data.hpp"

#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <stdexcept>
#include <utility>

#include "engine/config/recipe_fields.hpp"
#include "engine/config/recipe_io.hpp"
#include "engine/train/lr_schedule_of.hpp"

namespace loom {
namespace {

std::string hex32(uint32_t v) {
  char b[16];
  std::snprintf(b, sizeof b, "%08x", v);
  return b;
}

}  // namespace

LoaderState resume_data_position(const SavedDataPosition& saved, const DataNow& now, bool allow_changes,
                                 std::vector<std::string>* notes) {
  LoaderState at = saved.loader;
  // A checkpoint of an older Loom records only the step: its position is step x global batch
  // of the run that saved it, which it did not record either; assume the recipe's.
  if (at.next_sample < 0) {
    at.next_sample = at.next_step * now.global_batch;
    if (notes)
      notes->push_back("the checkpoint (from an older Loom) records no sample position: assuming it was trained with "
                       "this recipe's global batch of " + std::to_string(now.global_batch) + ", so continuing at sample " +
                       std::to_string(at.next_sample));
  }
  std::vector<std::string> reorder;
  if (saved.seed_recorded && saved.seed != now.seed)
    reorder.push_back("train.seed changed from " + std::to_string(saved.seed) + " to " + std::to_string(now.seed));
  if (saved.blend != now.blend)
    reorder.push_back("the data.train blend changed from " + (saved.blend.empty() ? "one dataset" : saved.blend) +
                      " to " + (now.blend.empty() ? "one dataset" : now.blend));
  else if (saved.samples_per_epoch >= 0 && saved.samples_per_epoch != now.samples_per_epoch)
    reorder.push_back("the training data changed from " + std::to_string(saved.samples_per_epoch) + " to " +
                      std::to_string(now.samples_per_epoch) + " samples per epoch");
  // The same number of samples but other tokens (a file edited or replaced in place, a corpus
  // re-prepared): the order is unchanged, the samples at the saved positions are not.
  std::string content;
  if (reorder.empty() && saved.data_tokens >= 0 &&
      (uint64_t(saved.data_tokens) != now.data.tokens || saved.data_crc32c != now.data.crc32c))
    content = "the training data's tokens changed (" + std::to_string(saved.data_tokens) + " tokens of CRC-32C " +
              hex32(saved.data_crc32c) + " at the checkpoint, now " + std::to_string(now.data.tokens) + " of " +
              hex32(now.data.crc32c) + ")";
  if (!reorder.empty() || !content.empty()) {
    std::string what = content;
    for (const auto& r : reorder) what += (what.empty() ? "" : "; ") + r;
    if (!allow_changes)
      throw std::runtime_error(
          "resuming: " + what + " since the checkpoint. " +
          (reorder.empty() ? std::string("The run would go on in other data than it was trained on so far, at the "
                                         "same sample positions. Restore the data")
                           : std::string("The sample order would differ from the saved run's (samples already seen "
                                         "this epoch would come again, others not at all). Restore the old value")) +
          ", or set checkpoint.allow_changes=true to resume anyway");
    if (notes)
      notes->push_back(what + " (checkpoint.allow_changes=true): " +
                       (reorder.empty() ? "the run goes on at sample " + std::to_string(at.next_sample) +
                                              " of the same order, in the new data"
                                        : "the sample order from sample " + std::to_string(at.next_sample) +
                                              " on follows the new stream"));
  }
  // Validation only measures: a new data.val needs no consent, but its val_loss is not comparable
  // with the saved run's, which a curve that jumps at the resume would not say by itself.
  if (saved.val_tokens >= 0 && now.val.tokens > 0 &&
      (uint64_t(saved.val_tokens) != now.val.tokens || saved.val_crc32c != now.val.crc32c) && notes)
    notes->push_back("data.val's tokens changed (" + std::to_string(saved.val_tokens) + " tokens of CRC-32C " +
                     hex32(saved.val_crc32c) + " at the checkpoint, now " + std::to_string(now.val.tokens) + " of " +
                     hex32(now.val.crc32c) + "): val_loss from here on is over other tokens than before the "
                     "resume, not comparable with it");
  if (saved.global_batch > 0 && saved.global_batch != now.global_batch && notes)
    notes->push_back("the global batch changed from " + std::to_string(saved.global_batch) + " to " +
                     std::to_string(now.global_batch) + " samples: continuing at sample " +
                     std::to_string(at.next_sample) + " of the stream (step " + std::to_string(at.next_step) +
                     "), nothing skipped or repeated; " +
                     (now.schedule_in_samples ? std::string("the learning-rate schedule follows the sequences trained")
                                              : std::string("the learning-rate schedule still counts steps")));
  return at;
}

std::vector<std::string> schedule_changes(const std::string& saved_recipe_yaml, const Recipe& now, int64_t from_step,
                                          double schedule_at) {
  std::vector<std::string> out;
  if (saved_recipe_yaml.empty()) return out;  // a checkpoint of an older Loom: nothing to compare
  YAML::Node saved;
  try {
    saved = YAML::Load(saved_recipe_yaml);
  } catch (const std::exception&) {
    return out;
  }
  // The checkpoint's run: the values it recorded, parsed as a recipe's are; a key it did not
  // record (a Loom before the key existed) keeps its default, which was then the only behaviour.
  Recipe was;
  struct Key {
    const char* name;
    bool schedule;  // shapes the learning rate
  };
  const Key keys[] = {{"optim.lr", true},           {"optim.min_lr", true},         {"optim.warmup_steps", true},
                      {"optim.lr_decay", true},     {"optim.decay_steps", true},    {"optim.wsd_decay_steps", true},
                      {"optim.wsd_shape", true},    {"train.steps", true},          {"optim.weight_decay", false},
                      {"optim.beta1", false},       {"optim.beta2", false},         {"optim.grad_clip", false}};
  std::vector<std::string> unreadable;  // recorded, but not as a value of the key: not compared
  for (const Key& key : keys) {
    const std::string k = key.name, section = k.substr(0, k.find('.')), name = k.substr(k.find('.') + 1);
    try {
      const YAML::Node n = saved[section][name];
      if (!n) continue;
      if (!n.IsScalar()) throw std::runtime_error("not a scalar");
      apply_override(was, k + "=" + n.Scalar());
    } catch (const std::exception&) {
      unreadable.push_back(k);
    }
  }
  bool schedule_changed = false;
  for (const Key& key : keys) {
    const std::string k = key.name;
    if (std::find(unreadable.begin(), unreadable.end(), k) != unreadable.end()) continue;
    const Field* f = find_field(k.substr(0, k.find('.')), k.substr(k.find('.') + 1));
    const std::string v_now = field_value_string(*f, now), v_was = field_value_string(*f, was);
    if (v_now == v_was) continue;
    schedule_changed = schedule_changed || key.schedule;
    out.push_back(k + " is " + v_now + ", the checkpoint's run had " + v_was + ": the new value applies from step " +
                  std::to_string(from_step + 1));
  }
  if (schedule_changed) {
    // What the changes do to the rate where the run goes on: a longer train.steps in a WSD run's
    // stable phase changes nothing there; a new optim.lr makes it jump.
    const double lr_now = lr_schedule_of(now).at_progress(schedule_at),
                 lr_was = lr_schedule_of(was).at_progress(schedule_at);
    char b[96];
    std::snprintf(b, sizeof b, "%g", lr_now);
    std::string line = "the learning rate at step " + std::to_string(from_step + 1) + " is " + b;
    if (std::fabs(lr_now - lr_was) <= 1e-12 * std::max(std::fabs(lr_now), std::fabs(lr_was))) {
      line += ", as the checkpoint's schedule had it";
    } else {
      std::snprintf(b, sizeof b, "%g", lr_was);
      line += std::string(" (the checkpoint's schedule had ") + b + "): it jumps there";
    }
    out.push_back(line + "; the schedule now: " + describe(lr_schedule_of(now)));
  }
  return out;
}

}  // namespace loom
