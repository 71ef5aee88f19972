#pragma once
// data.val_fraction: validation held out of the training data, as views of its files.
#include "engine/data/token_dataset.hpp"

namespace loom {

// Megatron's --split in Loom's terms (data.val_fraction): the last `fraction` of the tokens of
// `d` (of each part's own tokens, for a blend, which keeps its weights) becomes the returned
// validation dataset, and `d` keeps the rest: views of the same mapped files, a shard cut in two
// where the boundary falls inside it. The boundary is a token, not a document boundary.
TokenDataset split_off_validation(TokenDataset& d, double fraction);

}  // namespace loom
