#pragma once
// The validation loss: forward only, micro-batch by micro-batch through the pipeline
// (activations flow down the stages in order; nothing flows back), averaged over the
// micro-batches and the data-parallel ranks. Collective over the world; the same value on every rank.
#include <vector>

#include "engine/data/data_loader.hpp"
#include "engine/model/gpt.hpp"
#include "parallel/process_groups.hpp"

namespace loom {

double evaluate(Gpt& model, parallel::ProcessGroups& groups, const std::vector<StepBatch>& batches, int micro_steps);

}  // namespace loom
