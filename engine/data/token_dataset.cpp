#include "engine/data/token_dataset.hpp"

#include <glob.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <stdexcept>

namespace loom {
namespace fs = std::filesystem;
namespace {

[[noreturn]] void bad(const std::string& key, const std::string& path, const std::string& what) {
  throw std::runtime_error(key + "=" + path + ": " + what);
}

std::vector<std::string> expand_glob(const std::string& pattern) {
  glob_t g{};
  std::vector<std::string> out;
  if (::glob(pattern.c_str(), 0, nullptr, &g) == 0)
    for (size_t i = 0; i < g.gl_pathc; ++i) out.emplace_back(g.gl_pathv[i]);
  ::globfree(&g);
  std::sort(out.begin(), out.end());
  return out;
}

// Detects a single file's format from its first bytes.
std::string detect(const std::string& path) {
  if (path.size() > 4 && (path.ends_with(".idx") || path.ends_with(".bin")) &&
      fs::exists(path.substr(0, path.size() - 4) + ".idx"))
    return "megatron";
  if (fs::exists(path + ".idx")) return "megatron";
  std::ifstream f(path, std::ios::binary);
  char head[8] = {0};
  f.read(head, 8);
  const auto n = f.gcount();
  if (n == 8 && std::equal(head, head + 8, kLoomShardMagic)) return "loom";
  int32_t first = 0;
  std::memcpy(&first, head, 4);
  if (n >= 4 && first == kLlmcMagic) return "llmc";
  // Text: no NUL byte in the first 64 KiB.
  f.clear();
  f.seekg(0);
  std::string buf(1 << 16, '\0');
  f.read(buf.data(), std::streamsize(buf.size()));
  buf.resize(size_t(f.gcount()));
  if (!buf.empty() && buf.find('\0') == std::string::npos) return "text";
  return "";
}

TokenShard open_as(const std::string& path, const std::string& format) {
  if (format == "loom") return open_loom_shard(path);
  if (format == "llmc") return open_llmc_shard(path);
  if (format == "text") return open_text_as_bytes(path);
  // megatron: accept PREFIX, PREFIX.bin or PREFIX.idx
  std::string prefix = path;
  if (prefix.ends_with(".bin") || prefix.ends_with(".idx")) prefix.resize(prefix.size() - 4);
  return open_megatron_dataset(prefix);
}

void open_files(TokenDataset& d, const std::vector<std::string>& files, const std::string& format,
                const std::string& key) {
  for (const auto& file : files) {
    std::string f = format;
    if (f == "auto") {
      f = detect(file);
      if (f.empty())
        bad(key, d.source,
            file + " is not a format Loom recognises (expected a Loom shard \"LOOMTOKS\", an llm.c shard with "
                   "magic 20240520, a Megatron PREFIX.idx/.bin pair, or text); set data.format");
    }
    if (d.format.empty()) d.format = f;
    else if (d.format != f) bad(key, d.source, "mixes formats: " + file + " is " + f + ", earlier files are " + d.format);
    try {
      d.shards.push_back(open_as(file, f));
    } catch (const std::exception& e) {
      throw std::runtime_error(key + "=" + d.source + ": " + e.what());
    }
  }
}

void open_manifest_dir(TokenDataset& d, const fs::path& dir, const std::string& key, const std::string& split) {
  const fs::path mpath = dir / "manifest.json";
  nlohmann::json m;
  try {
    std::ifstream in(mpath);
    m = nlohmann::json::parse(in);
  } catch (const std::exception& e) {
    bad(key, d.source, mpath.string() + ": cannot parse the manifest: " + e.what());
  }
  if (!m.contains(split) || !m[split].contains("shards"))
    bad(key, d.source, mpath.string() + " has no '" + split + "' split");
  std::vector<std::string> files;
  for (const auto& s : m[split]["shards"]) files.push_back((dir / s.at("file").get<std::string>()).string());
  if (files.empty()) bad(key, d.source, mpath.string() + ": the '" + split + "' split has no shards");
  open_files(d, files, "loom", key);
  d.declared_vocab = m.value("vocab_size", 0);
  d.declared_by = mpath.string();
}

}  // namespace

size_t TokenDataset::tokens() const {
  size_t n = 0;
  for (const auto& s : shards) n += s.count;
  return n;
}

TokenDataset open_dataset(const std::string& path, const std::string& format, const std::string& key,
                          const std::string& split) {
  TokenDataset d;
  d.source = path;
  if (path.empty()) throw std::runtime_error(key + ": no data given (set " + key + " in the recipe)");
  std::error_code ec;
  if (path.find_first_of("*?[") != std::string::npos) {
    auto files = expand_glob(path);
    if (files.empty()) bad(key, path, "the pattern matches no file");
    open_files(d, files, format, key);
  } else if (fs::is_directory(path, ec)) {
    if (fs::exists(fs::path(path) / "manifest.json") && (format == "auto" || format == "loom")) {
      open_manifest_dir(d, path, key, split);
    } else {
      std::vector<std::string> files;
      for (const auto& e : fs::directory_iterator(path)) {
        const std::string name = e.path().filename().string();
        if (!e.is_regular_file() || name.starts_with(".")) continue;
        if (format == "megatron" && !name.ends_with(".idx")) continue;  // one entry per PREFIX
        files.push_back(e.path().string());
      }
      std::sort(files.begin(), files.end());
      if (files.empty()) bad(key, path, "the directory holds no data files");
      open_files(d, files, format, key);
    }
  } else if (fs::exists(path, ec) || fs::exists(path + ".idx", ec)) {
    open_files(d, {path}, format, key);
  } else {
    bad(key, path, "no such file or directory");
  }
  if (d.declared_vocab == 0)
    for (const auto& s : d.shards)
      if (s.vocab_size) d.declared_vocab = int(s.vocab_size), d.declared_by = s.name;
  return d;
}

void validate_dataset(const TokenDataset& d, int vocab_size, int seq_len, const std::string& key) {
  if (d.declared_vocab && d.declared_vocab != vocab_size)
    bad(key, d.source,
        d.declared_by + " declares vocab size " + std::to_string(d.declared_vocab) + " but model.vocab_size is " +
            std::to_string(vocab_size));
  for (const auto& s : d.shards) {
    if (s.count == 0) bad(key, d.source, s.name + " is empty (0 tokens)");
    if (s.count < size_t(seq_len) + 1)
      bad(key, d.source,
          s.name + " holds " + std::to_string(s.count) + " tokens, shorter than one sample of seq_len+1 = " +
              std::to_string(seq_len + 1));
    const uint32_t mx = s.max_token();
    if (mx >= uint32_t(vocab_size))
      bad(key, d.source,
          s.name + " contains token id " + std::to_string(mx) + ", not below model.vocab_size=" +
              std::to_string(vocab_size));
  }
}

}  // namespace loom
