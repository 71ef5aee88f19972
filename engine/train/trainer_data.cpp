// The Trainer's data: the datasets opened and checked before anything else is allocated (the
// same training and validation tokens on every rank), log.choices' items, and where a resumed
// run's stream starts (resume_data.hpp has the rules).
#include <cstdio>
#include <stdexcept>
#include <string>
#include <vector>

#include "engine/data/dataset_tokenizer.hpp"
#include "engine/data/held_out_split.hpp"
#include "engine/train/choice_scoring.hpp"
#include "engine/train/same_data.hpp"
#include "engine/train/trainer.hpp"
#include "parallel/mpi_world.hpp"

namespace loom {

TokenDataset Trainer::open_data(DataFingerprint* train_print, DataFingerprint* val_print) {
  // Every rank opens the data, and one that fails alone (a node without the file system) must
  // not leave the others waiting in the next collective: they agree on the error first.
  const auto& m = r_.model;
  TokenDataset train;
  parallel::agreed(groups_.world(), [&] {
    if (!r_.log.choices.empty()) choice_items_ = open_choices();
    train = open_dataset(r_.data.train, r_.data.format, "data.train", "train");
    // data.val_fraction: the held-out tail, cut before anything is checked or fingerprinted, so
    // that the training data's fingerprint is what it trains on.
    TokenDataset val;
    if (r_.data.val_fraction > 0) val = split_off_validation(train, r_.data.val_fraction);
    *train_print = validate_dataset(train, m.vocab_size, m.seq_len, "data.train");
    if (!r_.data.val.empty()) val = open_dataset(r_.data.val, r_.data.format, "data.val", "val");
    if (!r_.data.val.empty() || r_.data.val_fraction > 0) {
      const char* val_key = r_.data.val.empty() ? "data.val_fraction" : "data.val";
      *val_print = validate_dataset(val, m.vocab_size, m.seq_len, val_key);
      if (r_.data.val_fraction > 0) {
        char b[256];
        if (train.blend.empty())
          std::snprintf(b, sizeof b, "loom: data.val_fraction=%g: validation is the last %llu of data.train's tokens, "
                        "training the other %llu", r_.data.val_fraction, (unsigned long long)val_print->tokens,
                        (unsigned long long)train_print->tokens);
        else
          std::snprintf(b, sizeof b, "loom: data.val_fraction=%g: validation is that fraction at the end of each part "
                        "of the data.train blend, with the blend's weights (%llu tokens), training the other %llu",
                        r_.data.val_fraction, (unsigned long long)val_print->tokens,
                        (unsigned long long)train_print->tokens);
        val_split_note_ = b;
      }
      if (r_.log.eval_every > 0) {
        val_batches_ = validation_batches(val, layout_, r_.log.eval_batches);
        // (A blend's small part repeats before the whole does: the distinct samples the asked
        // positions hold, and how far the stream goes before its first repeat.)
        const SampleIndex index(val, m.seq_len);
        const uint64_t asked = uint64_t(r_.log.eval_batches) * uint64_t(layout_.global_batch());
        val_repeat_note_ = validation_repeat_note(index.distinct_in_order(asked), index.repeat_free_in_order(asked),
                                                  !index.parts().empty());
        // The same tokens on both keys (one Megatron PREFIX or llm.c file named twice): val_loss
        // is then a training loss, which nothing else would say.
        if (val_print->tokens == train_print->tokens && val_print->crc32c == train_print->crc32c)
          val_same_note_ = "loom: note: data.val holds the same " + std::to_string(val_print->tokens) +
                           " tokens as data.train: val_loss measures the training data, not held-out text (a loom "
                           "prep directory named by both keys gives its train and val splits; loom prep "
                           "--val-fraction makes them)";
      }
    }
  });
  // Every rank must train, and evaluate, on the same tokens (same_data.hpp): a node whose own
  // copy differs (a stale node-local copy) is refused, naming it.
  std::string differs = data_differs_from_rank0(groups_.world(), "data.train=" + r_.data.train, *train_print,
                                                "training data");
  // (Collectives: every rank calls them, whatever data.train gave. data.val_fraction's tail is
  // not in the training fingerprint, so it is compared too.)
  if (!r_.data.val.empty() || r_.data.val_fraction > 0) {
    const std::string what = r_.data.val.empty() ? "data.val_fraction=" + std::to_string(r_.data.val_fraction) +
                                                       " of data.train=" + r_.data.train
                                                 : "data.val=" + r_.data.val;
    const std::string val = data_differs_from_rank0(groups_.world(), what, *val_print, "validation data");
    if (differs.empty()) differs = val;
  }
  if (!r_.log.choices.empty()) {
    const std::string items = data_differs_from_rank0(groups_.world(), "log.choices=" + r_.log.choices,
                                                      choice_items_fingerprint(choice_items_), "multiple-choice items");
    if (differs.empty()) differs = items;
  }
  parallel::agreed(groups_.world(), [&] {
    if (!differs.empty()) throw std::runtime_error(differs);
  });
  return train;
}

std::vector<ChoiceItem> Trainer::open_choices() const {
  // Text items take data.train's tokenizer (what the model learned); llm.c's file needs none.
  return open_choice_items(r_.log.choices, "log.choices", r_.model.vocab_size, r_.model.seq_len, r_.log.choices_limit,
                           [&] {
                             const TokenizerSpec t = dataset_tokenizer(r_.data.train);
                             if (t.kind.empty())
                               throw std::runtime_error(
                                   "log.choices " + r_.log.choices + " is not an llm.c eval file, so it is text to "
                                   "tokenize, and data.train=" + r_.data.train + " records no tokenizer (it is no "
                                   "loom prep directory): give llm.c's eval file (tokenized already), or train on "
                                   "data made by loom prep");
                             return make_tokenizer(t);
                           });
}

void Trainer::score_choice_items(StepRecord& rec) {
  const std::vector<ChoiceScore> scores =
      gather_choice_scores(groups_.world(), score_choices(*model_, groups_, choice_items_));
  if (scores.empty()) return;  // not rank 0
  const ChoiceTally t = tally_choices(scores);
  rec.choice_acc = t.acc();
  rec.choice_acc_norm = t.acc_norm();
}

std::string Trainer::validation_repeat_note(uint64_t distinct, uint64_t repeat_free, bool blend) const {
  // validation_batches wraps around a split shorter than the evaluation: val_loss then counts
  // sequences more than once, which the user should know (loom eval says so). The fix offered
  // is the evaluation with no repeat at all: for a blend fewer batches than the distinct count
  // suggests, as its smallest part comes round first.
  const uint64_t batch = uint64_t(layout_.global_batch());
  const uint64_t asked = uint64_t(r_.log.eval_batches) * batch;
  if (asked <= distinct) return "";
  const std::string fix = repeat_free >= batch ? "set log.eval_batches to at most " + std::to_string(repeat_free / batch)
                          : distinct >= batch  ? "even its first global batch repeats sequences of a part too small "
                                                 "for its weight: give that part more data or less weight"
                                               : "it holds less than one global batch";
  // (The validation data is data.val, or data.val_fraction's tail of data.train.)
  const std::string val = r_.data.val.empty() ? "the validation data (data.val_fraction)" : "data.val";
  return "loom: note: log.eval_batches=" + std::to_string(r_.log.eval_batches) + " asks for " + std::to_string(asked) +
         " validation sequences of " + std::to_string(r_.model.seq_len) + " tokens (global batches of " +
         std::to_string(batch) + "); " + val + " " +
         (blend ? "is a blend whose parts give " + std::to_string(distinct) + " distinct ones among them, so some repeat"
                : "holds " + std::to_string(distinct) + " distinct ones, so they repeat") +
         ": val_loss counts sequences more than once; " + fix;
}

void Trainer::check_lora_base() {
  // Collective: every rank fingerprinted its own copy of the base (nodes may differ).
  parallel::agreed(groups_.world(), [&] {
    if (resumed_.path.empty() || resumed_.base_fingerprint.empty() || lora_base_fingerprint_.empty() ||
        resumed_.base_fingerprint == lora_base_fingerprint_)
      return;
    const std::string what = "model.init_from=" + r_.model.init_from + " (" + lora_base_path_ +
                             ") holds other weights than the frozen base the checkpoint's adapters were trained on (" +
                             resumed_.base_fingerprint + " then, " + lora_base_fingerprint_ + " now)";
    if (!r_.checkpoint.allow_changes)
      throw std::runtime_error("resuming " + resumed_.path + ": " + what +
                               ": point model.init_from at that base, or set checkpoint.allow_changes=true to train "
                               "the adapters on over this one");
    resume_notes_.push_back(what + " (checkpoint.allow_changes=true): the adapters train on over these weights");
  });
}

void Trainer::announce_resume(const std::string& batch_note) const {
  // Said only once nothing refuses the checkpoint, then what changed since it was saved.
  if (rank_ != 0 || resumed_.path.empty()) return;
  std::printf("loom: %s\n", resumed_.loaded_line.c_str());
  if (!batch_note.empty()) std::printf("loom: resuming: %s\n", batch_note.c_str());
  for (const std::string& n : resume_notes_) std::printf("loom: resuming: %s\n", n.c_str());
  std::fflush(stdout);
}

LoaderState Trainer::resume_position() {
  if (resumed_.path.empty()) return {};
  const LoaderState start = resume_data_position(resumed_.data, data_now_, r_.checkpoint.allow_changes, &resume_notes_);
  const double schedule_at = batch_.adaptive() ? batch_.progress(start.next_sample) : double(resumed_.steps_done);
  for (std::string& n : schedule_changes(resumed_.recipe_yaml, r_, resumed_.steps_done, schedule_at))
    resume_notes_.push_back(std::move(n));
  return start;
}

}  // namespace loom
