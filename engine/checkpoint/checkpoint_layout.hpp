#pragma once
// What a checkpoint's model.h5 holds, as a function of the model's shape alone (no layout): the
// global tensors in a fixed order, and for each three datasets (params/, adam_m/, adam_v/), so
// that a save, a load under another layout and `loom ckpt inspect` agree on names, shapes and
// byte counts. docs/checkpoints.md, "Layout on disk".
#include <cstdint>
#include <string>
#include <vector>

#include "engine/model/gpt_shape.hpp"

namespace loom {

constexpr const char* kCheckpointFile = "model.h5";
// Dataset 3 * tensor + group is group kCheckpointGroups[group] of tensor `tensor`.
constexpr const char* kCheckpointGroups[3] = {"params/", "adam_m/", "adam_v/"};

// A tensor under its global name with the shape stored for it (wte keeps only the real
// vocabulary rows: the padding depends on tp).
struct GlobalTensor {
  std::string name;
  std::vector<int64_t> shape;
};
std::vector<GlobalTensor> global_tensors(const GptShape& s);
// Every dataset's name, in file order ("params/wte", "adam_m/wte", "adam_v/wte", ...).
std::vector<std::string> dataset_names(const GptShape& s);
// Every dataset's size in bytes, in the same order.
std::vector<uint64_t> dataset_bytes(const std::vector<GlobalTensor>& tensors);

}  // namespace loom
