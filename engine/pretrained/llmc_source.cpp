// llm.c's GPT-2 checkpoint (gpt2_124M.bin, gpt2_124M_bf16.bin, and what train_gpt2.cu saves):
//   int32 header[256]: [0] magic 20240326, [1] version (3: fp32 weights, 5: bf16), [2] maxT,
//                      [3] V, [4] L, [5] NH, [6] C, [7] Vp (vocabulary padded, e.g. 50304)
//   then 16 tensors back to back, each layer's tensors of one kind stacked [L, ...], weights
//   [out, in] (nn.Linear): wte [Vp, C], wpe [maxT, C], ln1w, ln1b, qkvw [3C, C], qkvb, attprojw
//   [C, C], attprojb, ln2w, ln2b, fcw [4C, C], fcb, fcprojw [C, 4C], fcprojb, lnfw [C], lnfb [C].
#include <cstdint>
#include <cstring>
#include <stdexcept>

#include "engine/data/mapped_file.hpp"
#include "engine/pretrained/mapped_floats.hpp"
#include "engine/pretrained/pretrained_source.hpp"

namespace loom {
namespace {

constexpr int32_t kMagic = 20240326;
constexpr size_t kHeaderBytes = 256 * sizeof(int32_t);

struct Header {
  int version = 0, maxT = 0, V = 0, L = 0, NH = 0, C = 0, Vp = 0;
};

Header parse_header(const MappedFile& f) {
  if (f.size() < kHeaderBytes)
    throw std::runtime_error(f.path() + ": truncated: " + std::to_string(f.size()) +
                             " bytes, shorter than llm.c's 1024-byte header");
  int32_t h[8];
  std::memcpy(h, f.data(), sizeof h);
  if (h[0] != kMagic)
    throw std::runtime_error(f.path() + ": bad magic number " + std::to_string(h[0]) + " (llm.c's is 20240326)");
  Header x{h[1], h[2], h[3], h[4], h[5], h[6], h[7]};
  if (x.version != 3 && x.version != 5)
    throw std::runtime_error(f.path() + ": llm.c checkpoint version " + std::to_string(x.version) +
                             "; Loom reads version 3 (fp32) and 5 (bf16), the ones with a padded vocabulary");
  auto positive = [&](const char* what, int v) {
    if (v <= 0) throw std::runtime_error(f.path() + ": header " + what + " = " + std::to_string(v) + ", expected > 0");
  };
  positive("maxT", x.maxT), positive("V", x.V), positive("L", x.L), positive("NH", x.NH), positive("C", x.C);
  if (x.Vp < x.V)
    throw std::runtime_error(f.path() + ": header Vp = " + std::to_string(x.Vp) + " is smaller than V = " +
                             std::to_string(x.V));
  if (x.C % x.NH != 0)
    throw std::runtime_error(f.path() + ": header C = " + std::to_string(x.C) + " is not divisible by NH = " +
                             std::to_string(x.NH));
  return x;
}

class LlmcSource final : public PretrainedSource {
 public:
  LlmcSource(const std::string& path, MappedFile file, Header h)
      : PretrainedSource(path, ModelConfig{h.L, h.NH, h.C, h.V, h.maxT, ""}), file_(std::move(file)), h_(h) {
    const int64_t C = h.C, L = h.L;
    // Elements of each of the 16 tensors, in file order.
    const int64_t sizes[16] = {int64_t(h.Vp) * C, int64_t(h.maxT) * C, L * C, L * C, L * 3 * C * C, L * 3 * C,
                               L * C * C,         L * C,               L * C, L * C, L * 4 * C * C, L * 4 * C,
                               L * C * 4 * C,     L * C,               C,     C};
    uint64_t at = 0;
    for (int i = 0; i < 16; ++i) begin_[i] = at, at += uint64_t(sizes[i]);
    const uint64_t want = kHeaderBytes + at * elem_bytes();
    if (file_.size() != want)
      throw std::runtime_error(path + ": " + std::to_string(file_.size()) + " bytes, but its header (version " +
                               std::to_string(h.version) + ", L=" + std::to_string(h.L) + ", C=" +
                               std::to_string(h.C) + ", Vp=" + std::to_string(h.Vp) + ", maxT=" +
                               std::to_string(h.maxT) + ") says " + std::to_string(want) +
                               (file_.size() < want ? " (truncated)" : " (trailing bytes)"));
  }
  std::string format() const override { return "llm.c"; }
  std::string fingerprint() const override { return file_fingerprint(file_.path()); }

 protected:
  std::vector<float> read(const std::string& name, std::vector<int64_t>& shape) const override {
    const int64_t C = h_.C;
    if (name == "wte") return take(0, 0, int64_t(h_.V) * C, shape = {h_.V, C});  // the padding rows dropped
    if (name == "wpe") return take(1, 0, int64_t(h_.maxT) * C, shape = {h_.maxT, C});
    if (name == "ln_f.weight") return take(14, 0, C, shape = {C});
    if (name == "ln_f.bias") return take(15, 0, C, shape = {C});
    // "h.<l>.<tensor>"
    size_t dot = name.find('.', 2);
    if (name.rfind("h.", 0) == 0 && dot != std::string::npos) {
      const int64_t l = std::stoll(name.substr(2, dot - 2));
      const std::string t = name.substr(dot + 1);
      struct Kind { const char* name; int index; int64_t rows, cols; };
      const Kind kinds[] = {{"ln1.weight", 2, C, 0},         {"ln1.bias", 3, C, 0},
                            {"attn.qkv.weight", 4, 3 * C, C}, {"attn.qkv.bias", 5, 3 * C, 0},
                            {"attn.proj.weight", 6, C, C},    {"attn.proj.bias", 7, C, 0},
                            {"ln2.weight", 8, C, 0},         {"ln2.bias", 9, C, 0},
                            {"mlp.fc.weight", 10, 4 * C, C},  {"mlp.fc.bias", 11, 4 * C, 0},
                            {"mlp.proj.weight", 12, C, 4 * C}, {"mlp.proj.bias", 13, C, 0}};
      for (const Kind& k : kinds) {
        if (t != k.name) continue;
        if (l < 0 || l >= h_.L)
          throw std::runtime_error(path() + ": no layer " + std::to_string(l) + " (the header says L = " +
                                   std::to_string(h_.L) + ")");
        const int64_t n = k.rows * (k.cols ? k.cols : 1);
        shape = k.cols ? std::vector<int64_t>{k.rows, k.cols} : std::vector<int64_t>{k.rows};
        return take(k.index, l * n, n, shape);
      }
    }
    throw std::runtime_error(path() + ": llm.c's GPT-2 layout has no tensor for Loom's " + name);
  }

 private:
  size_t elem_bytes() const { return h_.version == 3 ? 4 : 2; }
  // n elements of tensor `index` from element `first`, as fp32.
  std::vector<float> take(int index, int64_t first, int64_t n, const std::vector<int64_t>&) const {
    std::vector<float> out(static_cast<size_t>(n));
    read_mapped_floats(file_, kHeaderBytes + (begin_[index] + uint64_t(first)) * elem_bytes(), out.size(),
                       h_.version == 3 ? StoredFloat::F32 : StoredFloat::BF16, out.data());
    return out;
  }

  MappedFile file_;
  Header h_;
  uint64_t begin_[16] = {};
};

}  // namespace

std::unique_ptr<PretrainedSource> open_llmc(const std::string& path) {
  MappedFile f(path);
  const Header h = parse_header(f);
  return std::make_unique<LlmcSource>(path, std::move(f), h);
}

}  // namespace loom
