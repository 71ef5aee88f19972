#include "engine/data/token_dataset.hpp"

#include <glob.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>
#include <stdexcept>

#include "engine/util/crc32c.hpp"

namespace loom {
namespace fs = std::filesystem;
namespace {

[[noreturn]] void bad(const std::string& key, const std::string& path, const std::string& what) {
  throw std::runtime_error(key + "=" + path + ": " + what);
}

std::string crc_hex(uint32_t c) {
  char b[16];
  std::snprintf(b, sizeof b, "0x%08x", c);
  return b;
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

// A Megatron dataset's PREFIX, from PREFIX, PREFIX.bin or PREFIX.idx.
std::string megatron_prefix(std::string path) {
  if (path.ends_with(".bin") || path.ends_with(".idx")) path.resize(path.size() - 4);
  return path;
}

TokenShard open_as(const std::string& path, const std::string& format) {
  if (format == "loom") return open_loom_shard(path);
  if (format == "llmc") return open_llmc_shard(path);
  if (format == "text") return open_text_as_bytes(path);
  return open_megatron_dataset(megatron_prefix(path));
}

void open_files(TokenDataset& d, const std::vector<std::string>& files, const std::string& format,
                const std::string& key) {
  std::set<std::string> megatron_prefixes;  // PREFIX.bin and PREFIX.idx are one dataset, opened once
  for (const auto& file : files) {
    // Before anything opens it: reading a FIFO, socket or device would block or never end.
    if (const std::string kind = special_file_kind(file); !kind.empty())
      bad(key, d.source, file + " is " + kind + ", not a regular file; Loom reads token data from regular files only");
    std::string f = format;
    std::error_code size_ec;
    if (fs::is_regular_file(file, size_ec) && fs::file_size(file, size_ec) == 0 && !size_ec)
      bad(key, d.source, file + " is empty (0 bytes)");
    if (f == "auto") {
      f = detect(file);
      if (f.empty())
        bad(key, d.source,
            file + " is not a format Loom recognises (expected a Loom shard \"LOOMTOKS\", an llm.c shard with "
                   "magic 20240520, a Megatron PREFIX.idx/.bin pair, or text); set data.format");
    }
    if (d.format.empty()) d.format = f;
    else if (d.format != f) bad(key, d.source, "mixes formats: " + file + " is " + f + ", earlier files are " + d.format);
    // A directory or glob lists both halves of one Megatron dataset: open it once.
    if (f == "megatron" && !megatron_prefixes.insert(megatron_prefix(file)).second) continue;
    try {
      d.shards.push_back(open_as(file, f));
    } catch (const std::exception& e) {
      throw std::runtime_error(key + "=" + d.source + ": " + e.what());
    }
  }
}

void open_manifest_dir(TokenDataset& d, const fs::path& dir, const std::string& key, const std::string& split) {
  const fs::path mpath = dir / "manifest.json";
  if (const std::string kind = special_file_kind(mpath.string()); !kind.empty())
    bad(key, d.source,
        mpath.string() + " is " + kind + ", not a regular file; Loom reads a manifest from a regular file only");
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
  std::vector<nlohmann::json> entries;
  try {
    for (const auto& s : m[split]["shards"]) {
      files.push_back((dir / s.at("file").get<std::string>()).string());
      entries.push_back(s);
    }
  } catch (const std::exception& e) {
    bad(key, d.source, mpath.string() + ": a '" + split + "' shard entry has no \"file\" name: " + e.what());
  }
  if (files.empty()) bad(key, d.source, mpath.string() + ": the '" + split + "' split has no shards");
  open_files(d, files, "loom", key);
  // The shards are mapped already: checksum them against the manifest (several GB/s, docs/data.md),
  // so that a damaged byte is found here rather than trained on.
  for (size_t i = 0; i < files.size(); ++i) {
    const TokenShard& s = d.shards[i];
    if (entries[i].contains("tokens") && entries[i]["tokens"].is_number_unsigned() &&
        entries[i]["tokens"].get<uint64_t>() != s.count)
      bad(key, d.source,
          files[i] + ": the header holds " + std::to_string(s.count) + " tokens but " + mpath.string() + " records " +
              std::to_string(entries[i]["tokens"].get<uint64_t>()) + "; the directory is damaged (re-run loom prep)");
    if (!entries[i].contains("crc32c") || !entries[i]["crc32c"].is_number_unsigned()) continue;
    const auto want = entries[i]["crc32c"].get<uint64_t>();
    const uint32_t got = file_crc32c(*s.file);
    if (got != want)
      bad(key, d.source,
          files[i] + ": CRC-32C mismatch: the file's is " + crc_hex(got) + ", " + mpath.string() + " records " +
              crc_hex(uint32_t(want)) + "; the shard is damaged (`loom prep --check " + dir.string() +
              "` checks every shard; re-run loom prep with --force to rebuild it)");
  }
  d.declared_vocab = m.value("vocab_size", 0);
  d.declared_by = mpath.string();
}

// The name's parts between '_', '-', '.' and '/': "fineweb_val_000000.bin" -> fineweb, val,
// 000000, bin; "val/000000.bin" -> val, 000000, bin.
bool has_part(const std::string& name, std::initializer_list<const char*> words) {
  size_t start = 0;
  while (start <= name.size()) {
    size_t end = name.find_first_of("_-./", start);
    if (end == std::string::npos) end = name.size();
    const std::string part = name.substr(start, end - start);
    for (const char* w : words)
      if (part == w) return true;
    start = end + 1;
  }
  return false;
}

bool is_prep_shard_name(const std::string& name, const std::string& split) {
  // ShardWriter's naming: SPLIT_NNNNNN.bin
  if (!name.starts_with(split + "_") || !name.ends_with(".bin")) return false;
  const std::string digits = name.substr(split.size() + 1, name.size() - split.size() - 5);
  return !digits.empty() && std::all_of(digits.begin(), digits.end(), [](char c) { return c >= '0' && c <= '9'; });
}

// A directory read without a manifest, or a glob, must not mix the two splits: training on the val
// shards and evaluating on training data would go unnoticed.
void refuse_mixed_splits(const std::string& key, const std::string& path, const std::vector<std::string>& files,
                         bool glob) {
  const std::string holds = glob ? "the pattern matches" : "the directory holds";
  const std::string dir = glob ? fs::path(path).parent_path().string() : path;
  // A glob's files are named from its first directory with a wildcard on, so that the splits of
  // data/*/shard.bin over data/train/ and data/val/ are told apart too.
  fs::path fixed;
  for (const fs::path& part : fs::path(path).parent_path()) {
    if (part.string().find_first_of("*?[") != std::string::npos) break;
    fixed /= part;
  }
  std::string train, val;
  bool prep_train = false, prep_val = false;
  for (const auto& f : files) {
    const std::string name = fs::path(f).filename().string();
    std::string named = name;
    if (glob) {
      const fs::path rel = fixed.empty() ? fs::path(f) : fs::path(f).lexically_relative(fixed);
      if (!rel.empty()) named = rel.generic_string();
    }
    const bool t = has_part(named, {"train"}), v = has_part(named, {"val", "valid", "validation"});
    if (train.empty() && t && !v) train = named;  // a name with both parts says nothing
    if (val.empty() && v && !t) val = named;
    prep_train = prep_train || is_prep_shard_name(name, "train");
    prep_val = prep_val || is_prep_shard_name(name, "val");
  }
  if (prep_train && prep_val)
    bad(key, path,
        holds + " train_*.bin and val_*.bin shards (a loom prep output)" +
            (glob ? ": reading them all would train on the validation split"
                  : " but its manifest.json is missing, so the splits cannot be told apart") +
            "; point data.train and data.val at the files explicitly (data.train=" + dir + "/train_*.bin, data.val=" +
            dir + "/val_*.bin)" + (glob ? ", or at the directory, whose manifest says which is which" : " or re-run loom prep"));
  if (!train.empty() && !val.empty())
    bad(key, path,
        holds + " both training and validation files (" + train + ", " + val +
            "): reading them all would mix the splits; point data.train and data.val at globs of each" +
            (train.find('/') == std::string::npos ? ", e.g. " + dir + "/*train*.bin and " + dir + "/*val*.bin" : ""));
}

// A part's declared vocabulary against the blend's so far: two tokenizers are two datasets.
void merge_declared_vocab(TokenDataset& d, const TokenDataset& part, const std::string& key) {
  if (!part.declared_vocab) return;
  if (d.declared_vocab && d.declared_vocab != part.declared_vocab)
    bad(key, d.source,
        "mixes tokenizers: " + d.declared_by + " declares vocab size " + std::to_string(d.declared_vocab) + ", " +
            part.declared_by + " " + std::to_string(part.declared_vocab));
  d.declared_vocab = part.declared_vocab, d.declared_by = part.declared_by;
}

}  // namespace

std::vector<std::pair<double, std::string>> parse_blend(const std::string& spec, const std::string& key) {
  std::vector<std::pair<double, std::string>> out;
  std::error_code ec;
  if (spec.find_first_of(" \t\n") == std::string::npos || fs::exists(spec, ec)) return out;
  std::istringstream in(spec);
  std::vector<std::string> words;
  for (std::string w; in >> w;) words.push_back(w);
  auto number = [](const std::string& w, double& v) {
    char* end = nullptr;
    v = std::strtod(w.c_str(), &end);
    return end == w.c_str() + w.size() && std::isfinite(v);  // (an underflow to 0 is refused as a weight of 0)
  };
  double first = 0;
  if (words.empty() || !number(words[0], first)) return out;  // a path with spaces
  const std::string form = " (a blend is WEIGHT PATH pairs, Megatron's --data-path form, e.g. \"0.7 data/web 0.3 data/code\")";
  if (words.size() % 2 != 0)
    throw std::runtime_error(key + "='" + spec + "': " + std::to_string(words.size()) + " words, not WEIGHT PATH pairs" + form);
  if (words.size() < 4)
    throw std::runtime_error(key + "='" + spec + "': no such file or directory; read as a blend, it is of one dataset "
                             "(give two or more, or the path alone)" + form);
  for (size_t i = 0; i < words.size(); i += 2) {
    double w = 0;
    if (!number(words[i], w))
      throw std::runtime_error(key + "='" + spec + "': '" + words[i] + "' (before " + words[i + 1] + ") is not a weight" + form);
    if (!(w > 0)) throw std::runtime_error(key + "='" + spec + "': the weight of " + words[i + 1] + " is " + words[i] +
                                           "; weights must be above 0 (leave a dataset out instead)");
    out.emplace_back(w, words[i + 1]);
  }
  return out;
}

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
  if (const auto parts = parse_blend(path, key); !parts.empty()) {
    for (const auto& [weight, part_path] : parts) {
      TokenDataset part = open_dataset(part_path, format, key, split);
      merge_declared_vocab(d, part, key);
      d.blend.push_back({weight, part_path, d.shards.size(), part.shards.size()});
      if (d.format.empty()) d.format = part.format;
      else if (d.format != part.format) d.format = "blend";
      for (auto& s : part.shards) d.shards.push_back(std::move(s));
    }
    return d;
  }
  std::error_code ec;
  if (path.find_first_of("*?[") != std::string::npos) {
    auto files = expand_glob(path);
    if (files.empty()) bad(key, path, "the pattern matches no file");
    refuse_mixed_splits(key, path, files, true);
    open_files(d, files, format, key);
  } else if (fs::is_directory(path, ec)) {
    if (fs::exists(fs::path(path) / "manifest.json") && (format == "auto" || format == "loom")) {
      open_manifest_dir(d, path, key, split);
    } else {
      // Subdirectories and hidden files are skipped; any other entry that is not a regular file
      // (a FIFO, socket, device) is refused by open_files, as it would be when named or globbed.
      std::vector<std::string> files;
      for (const auto& e : fs::directory_iterator(path)) {
        const std::string name = e.path().filename().string();
        std::error_code dec;
        if (name.starts_with(".") || e.is_directory(dec)) continue;
        if (format == "megatron" && !name.ends_with(".idx")) continue;  // one entry per PREFIX
        files.push_back(e.path().string());
      }
      std::sort(files.begin(), files.end());
      if (files.empty()) bad(key, path, "the directory holds no data files");
      refuse_mixed_splits(key, path, files, false);
      open_files(d, files, format, key);
    }
  } else if (fs::exists(path, ec) || fs::exists(path + ".idx", ec)) {
    open_files(d, {path}, format, key);
  } else {
    bad(key, path, "no such file or directory");
  }
  if (d.declared_vocab == 0)
    for (const auto& s : d.shards) {
      if (!s.vocab_size) continue;
      // Every shard that declares a vocabulary must declare the same one: shards of two
      // tokenizers in one glob or directory are two datasets, whichever sorts last.
      if (d.declared_vocab && int(s.vocab_size) != d.declared_vocab)
        bad(key, d.source,
            "mixes tokenizers: " + d.declared_by + " declares vocab size " + std::to_string(d.declared_vocab) + ", " +
                s.name + " " + std::to_string(s.vocab_size));
      d.declared_vocab = int(s.vocab_size), d.declared_by = s.name;
    }
  return d;
}

DataFingerprint validate_dataset(const TokenDataset& d, int vocab_size, int seq_len, const std::string& key) {
  if (d.declared_vocab && d.declared_vocab != vocab_size)
    bad(key, d.source,
        d.declared_by + " declares vocab size " + std::to_string(d.declared_vocab) + " but model.vocab_size is " +
            std::to_string(vocab_size));
  // A shard shorter than one sample gives none (SampleIndex) and is fine, as a corpus's last
  // shard often is (loom prep cuts shards at --shard-tokens); the dataset as a whole, and each
  // part of a blend, must give one.
  std::vector<BlendPart> groups = d.blend;
  if (groups.empty()) groups.push_back({1.0, d.source, 0, d.shards.size()});
  for (const BlendPart& g : groups) {
    if (g.shard_count == 0)  // (data.val_fraction's tail of a part too small to round to a token)
      bad(key, d.source, (d.blend.empty() ? std::string("it") : "the blend's part " + g.source) + " holds no tokens");
    size_t longest = 0;
    std::string longest_name;
    for (size_t i = g.first_shard; i < g.first_shard + g.shard_count; ++i) {
      const TokenShard& s = d.shards[i];
      if (s.count == 0) bad(key, d.source, s.name + " is empty (0 tokens)");
      if (s.count > longest) longest = s.count, longest_name = s.name;
    }
    if (longest < size_t(seq_len) + 1)
      bad(key, d.source,
          (d.blend.empty() ? "" : "the blend's part " + g.source + ": ") +
              (g.shard_count == 1 ? longest_name + " holds " : "the longest shard, " + longest_name + ", holds ") +
              std::to_string(longest) + " tokens, shorter than one sample of seq_len+1 = " +
              std::to_string(seq_len + 1));
  }
  DataFingerprint print;
  for (const auto& s : d.shards) {
    const TokenShard::Scan scan = s.scan();
    if (scan.max_token >= uint32_t(vocab_size))
      bad(key, d.source,
          s.name + " contains token id " + std::to_string(scan.max_token) + ", not below model.vocab_size=" +
              std::to_string(vocab_size));
    const uint64_t bytes = uint64_t(s.count) * uint64_t(s.token_bytes);
    print.crc32c = print.tokens == 0 ? scan.crc32c : crc32c_combine(print.crc32c, scan.crc32c, bytes);
    print.tokens += s.count;
  }
  return print;
}

}  // namespace loom
