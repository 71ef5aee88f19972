#include "engine/checkpoint/checkpoint_layout.hpp"

#include "engine/model/param_table.hpp"

namespace loom {

std::vector<GlobalTensor> global_tensors(const GptShape& s) {
  std::vector<GlobalTensor> out;
  const ParamTable whole = gpt_param_table(s);  // named: a temporary would die before the loop
  for (const ParamInfo& p : whole.params()) {
    GlobalTensor g{p.name, p.global_shape};
    if (p.name == "wte") g.shape[0] = s.vocab;
    out.push_back(std::move(g));
  }
  return out;
}

std::vector<std::string> dataset_names(const GptShape& s) {
  std::vector<std::string> names;
  for (const GlobalTensor& g : global_tensors(s))
    for (const char* group : kCheckpointGroups) names.push_back(group + g.name);
  return names;
}

std::vector<uint64_t> dataset_bytes(const std::vector<GlobalTensor>& tensors) {
  std::vector<uint64_t> out;
  for (const GlobalTensor& g : tensors) {
    uint64_t n = sizeof(float);
    for (int64_t d : g.shape) n *= uint64_t(d);
    out.insert(out.end(), 3, n);
  }
  return out;
}

}  // namespace loom
