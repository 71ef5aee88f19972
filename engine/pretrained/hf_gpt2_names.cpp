#include "engine/pretrained/hf_gpt2_names.hpp"

#include <stdexcept>
#include <utility>

namespace loom {

HfTensorName hf_gpt2_name(const std::string& loom) {
  if (loom == "wte" || loom == "wpe") return {loom + ".weight", false};
  if (loom.rfind("ln_f.", 0) == 0) return {loom, false};
  if (loom.rfind("h.", 0) == 0) {
    const size_t dot = loom.find('.', 2);
    if (dot != std::string::npos) {
      const std::string block = loom.substr(0, dot + 1);  // "h.3."
      const std::string rest = loom.substr(dot + 1);
      static const std::pair<const char*, const char*> kModules[] = {
          {"ln1.", "ln_1."}, {"ln2.", "ln_2."}, {"attn.qkv.", "attn.c_attn."},
          {"attn.proj.", "attn.c_proj."}, {"mlp.fc.", "mlp.c_fc."}, {"mlp.proj.", "mlp.c_proj."}};
      for (const auto& [ours, theirs] : kModules) {
        const std::string o = ours;
        if (rest.rfind(o, 0) != 0) continue;
        const std::string leaf = rest.substr(o.size());
        if (leaf != "weight" && leaf != "bias") break;
        // Conv1D weights ([in, out]); LayerNorm weights are vectors.
        const bool conv = o.rfind("ln", 0) != 0 && leaf == "weight";
        return {block + theirs + leaf, conv};
      }
    }
  }
  throw std::invalid_argument("Loom's GPT has no tensor named '" + loom + "'");
}

}  // namespace loom
