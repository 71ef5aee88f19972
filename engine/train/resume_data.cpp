#include "engine/train/resume_data.hpp"

#include <stdexcept>

namespace loom {

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
  if (saved.samples_per_epoch >= 0 && saved.samples_per_epoch != now.samples_per_epoch)
    reorder.push_back("the training data holds " + std::to_string(now.samples_per_epoch) +
                      " samples per epoch, the checkpoint's had " + std::to_string(saved.samples_per_epoch));
  if (!reorder.empty()) {
    std::string what;
    for (const auto& r : reorder) what += (what.empty() ? "" : "; ") + r;
    if (!allow_changes)
      throw std::runtime_error(
          "resuming: " + what + " since the checkpoint. The sample order would differ from the saved run's (samples "
          "already seen this epoch would come again, others not at all). Restore the old value, or set "
          "checkpoint.allow_changes=true to resume anyway");
    if (notes)
      notes->push_back(what + " (checkpoint.allow_changes=true): the sample order from sample " +
                       std::to_string(at.next_sample) + " on follows the new stream");
  }
  if (saved.global_batch > 0 && saved.global_batch != now.global_batch && notes)
    notes->push_back("the global batch changed from " + std::to_string(saved.global_batch) + " to " +
                     std::to_string(now.global_batch) + " samples: continuing at sample " +
                     std::to_string(at.next_sample) + " of the stream (step " + std::to_string(at.next_step) +
                     "), nothing skipped or repeated; " +
                     (now.schedule_in_samples ? std::string("the learning-rate schedule follows the sequences trained")
                                              : std::string("the learning-rate schedule still counts steps")));
  return at;
}

}  // namespace loom
