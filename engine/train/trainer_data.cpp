// The Trainer's data: the datasets opened and checked before anything else is allocated (the
// same training tokens on every rank), and where a resumed run's stream starts (resume_data.hpp
// has the rules).
#include <cstdio>
#include <stdexcept>
#include <string>
#include <vector>

#include "engine/train/trainer.hpp"
#include "parallel/host_collectives.hpp"
#include "parallel/mpi_world.hpp"

namespace loom {
namespace {

std::string describe(const DataFingerprint& d) {
  char crc[16];
  std::snprintf(crc, sizeof crc, "%08x", d.crc32c);
  return std::to_string(d.tokens) + " tokens of CRC-32C " + crc;
}

}  // namespace

TokenDataset Trainer::open_data(DataFingerprint* train_print) {
  // Every rank opens the data, and one that fails alone (a node without the file system) must
  // not leave the others waiting in the next collective: they agree on the error first.
  const auto& m = r_.model;
  TokenDataset train;
  parallel::agreed(groups_.world(), [&] {
    train = open_dataset(r_.data.train, r_.data.format, "data.train", "train");
    *train_print = validate_dataset(train, m.vocab_size, m.seq_len, "data.train");
    if (!r_.data.val.empty()) {
      TokenDataset val = open_dataset(r_.data.val, r_.data.format, "data.val", "val");
      validate_dataset(val, m.vocab_size, m.seq_len, "data.val");
      if (r_.log.eval_every > 0) val_batches_ = validation_batches(val, layout_, r_.log.eval_batches);
    }
  });
  // Every rank must train on the same tokens. A node whose own copy of data.train differs (a
  // stale node-local copy) would draw other samples at the same positions: refused, naming it.
  const std::string mine = describe(*train_print), rank0 = parallel::broadcast_string(groups_.world(), mine);
  parallel::agreed(groups_.world(), [&] {
    if (mine != rank0)
      throw std::runtime_error("data.train=" + r_.data.train + ": this rank reads " + mine +
                               ", rank 0 reads " + rank0 +
                               ": every rank must see the same training data (a node-local copy that differs?)");
  });
  return train;
}

LoaderState Trainer::resume_position() const {
  if (resumed_.path.empty()) return {};
  std::vector<std::string> notes;
  const LoaderState start = resume_data_position(resumed_.data, data_now_, r_.checkpoint.allow_changes, &notes);
  for (std::string& n : schedule_changes(resumed_.recipe_yaml, r_, resumed_.steps_done)) notes.push_back(std::move(n));
  if (rank_ == 0)
    for (const std::string& n : notes) std::printf("loom: resuming: %s\n", n.c_str());
  return start;
}

}  // namespace loom
