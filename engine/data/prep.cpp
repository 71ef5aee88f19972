#include "engine/data/prep.hpp"

#include "engine/util/atomic_file.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <stdexcept>

#include "engine/data/mapped_file.hpp"
#include "engine/data/shard_writer.hpp"
#include "engine/data/token_shard.hpp"
#include "engine/data/tokenizer.hpp"
#include "engine/util/crc32c.hpp"
#include "engine/util/splitmix64.hpp"

namespace loom {
namespace fs = std::filesystem;
namespace {

constexpr size_t kFlushBytes = 1 << 20;  // encode a long document in pieces of about this size

bool is_space(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f'; }

// Routes documents to the train or val writer and tokenises them piecewise.
class DocumentSink {
 public:
  DocumentSink(const Tokenizer& tok, ShardWriter& train, ShardWriter& val, const PrepOptions& o, PrepSummary& sum)
      : tok_(tok), train_(train), val_(val), o_(o), sum_(sum) {}

  void append_line(const std::string& line, bool had_newline) {
    // A long document is flushed only between a line ending in a non-space and a line starting
    // with one: GPT-2's pre-tokeniser splits there anyway, so the ids do not depend on where the
    // pieces were cut.
    if (text_.size() >= kFlushBytes && !line.empty() && !is_space(line[0]) && text_.size() >= 2 &&
        text_.back() == '\n' && !is_space(text_[text_.size() - 2]))
      flush();
    if (!open_) start();
    text_ += line;
    if (had_newline) text_ += '\n';
  }
  void end_document() {
    if (open_) flush();
    open_ = false;
  }

 private:
  void start() {
    open_ = true;
    const double u = double(splitmix64(splitmix64(o_.seed) ^ sum_.documents) >> 11) * 0x1.0p-53;
    to_val_ = u < o_.val_fraction;
    ++sum_.documents;
    if (to_val_) ++sum_.val_documents;
    ids_.assign(1, uint32_t(tok_.eot_id()));  // every document starts with end-of-text
  }
  void flush() {
    tok_.encode(text_, ids_);
    (to_val_ ? val_ : train_).write(ids_.data(), ids_.size());
    text_.clear();
    ids_.clear();
  }

  const Tokenizer& tok_;
  ShardWriter &train_, &val_;
  const PrepOptions& o_;
  PrepSummary& sum_;
  std::string text_;
  std::vector<uint32_t> ids_;
  bool open_ = false, to_val_ = false;
};

nlohmann::json split_json(const std::vector<ShardInfo>& shards, uint64_t tokens) {
  nlohmann::json s = {{"tokens", tokens}, {"shards", nlohmann::json::array()}};
  for (const auto& sh : shards) s["shards"].push_back({{"file", sh.file}, {"tokens", sh.tokens}, {"crc32c", sh.crc32c}});
  return s;
}


// An input (text, vocab.json, merges.txt) must be an existing regular file: a FIFO or device
// would block the reader or never end.
void require_regular_input(const std::string& path, const std::string& what) {
  if (const std::string kind = special_file_kind(path); !kind.empty())
    throw std::runtime_error(path + " is " + kind + ", not a regular file; loom prep reads " + what +
                             " from regular files only");
  std::error_code ec;
  if (!fs::is_regular_file(path, ec)) throw std::runtime_error(path + ": " + what + " not found");
}

std::string crc_hex(uint32_t c) {
  char b[16];
  std::snprintf(b, sizeof b, "0x%08x", c);
  return b;
}

// `out` as a path whose last component names the directory itself ("data/x/" -> "data/x",
// "." -> the current directory's absolute path); a symbolic link to a directory is followed.
fs::path output_path(const std::string& out) {
  if (out.empty()) throw std::runtime_error("--out: expected an output directory");
  fs::path p = fs::absolute(out).lexically_normal();
  std::string s = p.string();
  while (s.size() > 1 && s.back() == '/') s.pop_back();
  p = s;
  std::error_code ec;
  if (fs::is_symlink(p, ec) && fs::is_directory(p, ec)) p = fs::canonical(p);
  if (p == p.root_path()) throw std::runtime_error("--out " + out + ": cannot write a dataset over the root directory");
  return p;
}

// What a non-empty output directory holds, for the refusal message; "" when it is empty.
// `only_dataset`: it holds nothing but a prepared dataset (manifest.json and .bin shards), the
// one kind of directory --force may replace.
std::string describe_contents(const fs::path& dir, bool* only_dataset) {
  size_t entries = 0, shards = 0;
  bool manifest = false;
  std::string example;
  for (const auto& e : fs::directory_iterator(dir)) {
    const std::string name = e.path().filename().string();
    ++entries;
    if (name == "manifest.json") manifest = true;
    else if (e.path().extension() == ".bin") ++shards;
    else if (example.empty()) example = name;
  }
  *only_dataset = entries > 0 && example.empty();
  if (entries == 0) return "";
  if (manifest || shards > 0) {
    std::string what = manifest ? "manifest.json" : "";
    if (shards) what += (what.empty() ? "" : ", ") + std::to_string(shards) + " shard file" + (shards == 1 ? "" : "s");
    if (entries > shards + (manifest ? 1 : 0))
      what += ", " + std::to_string(entries - shards - (manifest ? 1 : 0)) + " other entries";
    return "already holds a prepared dataset (" + what + ")";
  }
  return "is not empty (" + std::to_string(entries) + " entr" + (entries == 1 ? "y" : "ies") + ", e.g. '" + example +
         "')";
}

// Removes a directory tree on scope exit unless released (a prep that failed or was interrupted
// by an exception leaves no OUT.partial-XXXXXX behind).
class TreeGuard {
 public:
  explicit TreeGuard(fs::path p) : p_(std::move(p)) {}
  ~TreeGuard() {
    if (!p_.empty()) {
      std::error_code ec;
      fs::remove_all(p_, ec);
    }
  }
  void release() { p_.clear(); }

 private:
  fs::path p_;
};

// A fresh directory next to `target` ("TARGET.partial-XXXXXX"): same file system, so it can be
// renamed over `target`. Created with the usual mode (mkdtemp's 0700 would carry over to the
// dataset).
fs::path make_sibling_dir(const fs::path& target, const char* tag) {
  static const char* digits = "0123456789abcdefghijklmnopqrstuvwxyz";
  uint64_t x = splitmix64(uint64_t(::getpid()) ^ uint64_t(std::chrono::steady_clock::now().time_since_epoch().count()));
  for (int attempt = 0; attempt < 100; ++attempt) {
    std::string p = target.string() + tag;
    x = splitmix64(x);
    for (int i = 0; i < 6; ++i) p += digits[(x >> (6 * i)) % 36];
    if (::mkdir(p.c_str(), 0777) == 0) return p;
    if (errno != EEXIST)
      throw std::runtime_error(p + ": cannot create a directory next to the output: " + std::strerror(errno));
  }
  throw std::runtime_error(target.string() + tag + "*: cannot find a free name next to the output");
}

// Deletes a replaced dataset once the new one is in place. A failure (NFS keeps files a running
// job has open) is a warning: the new dataset is already there.
void remove_old(const fs::path& old) {
  std::error_code ec;
  fs::remove_all(old, ec);
  if (ec)
    std::fprintf(stderr, "loom prep: warning: the replaced dataset could not be deleted (%s); remove %s by hand\n",
                 ec.message().c_str(), old.string().c_str());
}

// Moves the finished `fresh` directory to `out`. An absent or empty `out` is replaced by one
// rename. A non-empty one (--force) is exchanged atomically with `fresh` (renameat2
// RENAME_EXCHANGE), or, where the file system cannot, renamed aside first; the old contents are
// removed only once the new dataset is in place.
void swap_into_place(const fs::path& fresh, const fs::path& out, bool out_has_content) {
  if (!out_has_content) {
    if (::rename(fresh.c_str(), out.c_str()) != 0) {
      const int err = errno;
      throw std::runtime_error(out.string() + ": cannot move the finished dataset into place from " + fresh.string() +
                               ": " + std::strerror(err) +
                               (err == ENOTEMPTY || err == EEXIST
                                    ? " (something else filled the directory meanwhile; it was left as it is)"
                                    : ""));
    }
    return;
  }
#ifdef RENAME_EXCHANGE
  if (::renameat2(AT_FDCWD, fresh.c_str(), AT_FDCWD, out.c_str(), RENAME_EXCHANGE) == 0) {
    remove_old(fresh);  // now the old contents
    return;
  }
  if (const int err = errno; err != EINVAL && err != ENOSYS && err != ENOTSUP)
    throw std::runtime_error(out.string() + ": cannot swap in the finished dataset from " + fresh.string() + ": " +
                             std::strerror(err));
#endif
  const fs::path old = make_sibling_dir(out, ".old-");
  if (::rename(out.c_str(), old.c_str()) != 0) {
    const int err = errno;
    fs::remove(old);
    throw std::runtime_error(out.string() + ": cannot move the old contents aside: " + std::strerror(err));
  }
  if (::rename(fresh.c_str(), out.c_str()) != 0) {
    const int err = errno;
    const bool restored = ::rename(old.c_str(), out.c_str()) == 0;  // put the old dataset back
    throw std::runtime_error(out.string() + ": cannot move the finished dataset into place: " + std::strerror(err) +
                             (restored ? "; the old dataset is back in place"
                                       : "; the old dataset could not be put back either: it is intact in " +
                                             old.string() + ", move it back to " + out.string()));
  }
  remove_old(old);
}

}  // namespace

PrepSummary run_prep(const PrepOptions& o) {
  auto t0 = std::chrono::steady_clock::now();
  if (o.inputs.empty()) throw std::runtime_error("loom prep: no input files");
  if (o.val_fraction < 0 || o.val_fraction >= 1)
    throw std::runtime_error("--val-fraction " + std::to_string(o.val_fraction) + ": expected a value in [0, 1)");
  if (o.shard_tokens < 1) throw std::runtime_error("--shard-tokens: expected a positive number");
  for (const auto& in : o.inputs) require_regular_input(in, "text");
  std::unique_ptr<Tokenizer> tok;
  if (o.tokenizer == "byte") tok = make_byte_tokenizer();
  else if (o.tokenizer == "gpt2") {
    if (o.vocab.empty() || o.merges.empty())
      throw std::runtime_error("--tokenizer gpt2 needs --vocab vocab.json and --merges merges.txt");
    require_regular_input(o.vocab, "the GPT-2 vocabulary (--vocab)");
    require_regular_input(o.merges, "the GPT-2 merges (--merges)");
    tok = make_gpt2_tokenizer(o.vocab, o.merges);
  } else {
    throw std::runtime_error("--tokenizer " + o.tokenizer + ": expected byte or gpt2");
  }

  // The output directory: never overwritten in place. An existing dataset (or anything else) is
  // replaced only with --force, and only once the new one is complete.
  const fs::path out = output_path(o.out);
  std::error_code ec;
  const auto st = fs::status(out, ec);
  bool out_has_content = false;
  if (fs::exists(st)) {
    if (!fs::is_directory(st)) throw std::runtime_error("--out " + o.out + ": exists and is not a directory");
    bool only_dataset = false;
    const std::string contents = describe_contents(out, &only_dataset);
    out_has_content = !contents.empty();
    if (out_has_content && !only_dataset)
      throw std::runtime_error("--out " + o.out + " " + contents +
                               ": it holds files that are not a prepared dataset, and --force replaces only a "
                               "directory that holds nothing but one (manifest.json and .bin shards); choose another "
                               "--out");
    if (out_has_content && !o.force)
      throw std::runtime_error("--out " + o.out + " " + contents +
                               "; pass --force to replace it (the new dataset is written aside and swapped in only "
                               "once complete), or choose another --out");
    // The dataset is written beside --out and renamed in: that cannot cross into a mount point.
    struct stat here {}, parent {};
    if (::stat(out.c_str(), &here) == 0 && ::stat(out.parent_path().c_str(), &parent) == 0 &&
        here.st_dev != parent.st_dev)
      throw std::runtime_error("--out " + o.out + " is a mount point: loom prep writes the dataset beside it and "
                               "renames it into place, which cannot cross file systems; use a directory inside it, "
                               "e.g. --out " + (out / "dataset").string());
    std::vector<std::string> mine = o.inputs;
    if (!o.vocab.empty()) mine.push_back(o.vocab);
    if (!o.merges.empty()) mine.push_back(o.merges);
    if (out_has_content)
      for (const auto& in : mine) {
        const fs::path rel = fs::weakly_canonical(in).lexically_relative(fs::weakly_canonical(out));
        if (!rel.empty() && *rel.begin() != "..")
          throw std::runtime_error("--force --out " + o.out + ": the input " + in +
                                   " lies inside the directory that --force would replace; move it out first");
      }
  }
  fs::create_directories(out.parent_path(), ec);
  if (ec) throw std::runtime_error(out.parent_path().string() + ": cannot create the output's parent: " + ec.message());
  const fs::path work = make_sibling_dir(out, ".partial-");
  TreeGuard guard(work);

  PrepSummary sum;
  ShardWriter train(work.string(), "train", tok->vocab_size(), tok->eot_id(), o.shard_tokens);
  ShardWriter val(work.string(), "val", tok->vocab_size(), tok->eot_id(), o.shard_tokens);
  DocumentSink sink(*tok, train, val, o, sum);
  nlohmann::json sources = nlohmann::json::array();
  std::vector<char> iobuf(1 << 20);
  for (const auto& in : o.inputs) {
    std::ifstream f(in, std::ios::binary);
    if (!f) throw std::runtime_error(in + ": cannot open");
    f.rdbuf()->pubsetbuf(iobuf.data(), std::streamsize(iobuf.size()));
    uint32_t crc = 0;
    uint64_t bytes = 0;
    std::string line;
    while (std::getline(f, line)) {
      const bool newline = !f.eof();
      crc = crc32c(line.data(), line.size(), crc);
      if (newline) crc = crc32c("\n", 1, crc);
      bytes += line.size() + (newline ? 1 : 0);
      if (!o.doc_separator.empty() && line == o.doc_separator) sink.end_document();
      else sink.append_line(line, newline);
    }
    sink.end_document();  // a file always ends a document
    sum.input_bytes += bytes;
    sources.push_back({{"path", in}, {"bytes", bytes}, {"crc32c", crc}});
  }
  const auto& train_shards = train.finish();
  const auto& val_shards = val.finish();
  sum.train_tokens = train.tokens();
  sum.val_tokens = val.tokens();
  if (sum.train_tokens == 0) throw std::runtime_error("loom prep: the inputs hold no text for the train split");

  nlohmann::json m = {{"format", "loom-tokens"},
                      {"version", 1},
                      {"tokenizer", tok->name()},
                      {"vocab_size", tok->vocab_size()},
                      {"eot_id", tok->eot_id()},
                      {"dtype", tok->vocab_size() <= 65536 ? "uint16" : "uint32"},
                      {"documents", sum.documents},
                      {"val_fraction", o.val_fraction},
                      {"doc_separator", o.doc_separator},
                      {"seed", o.seed},
                      {"train", split_json(train_shards, sum.train_tokens)},
                      {"val", split_json(val_shards, sum.val_tokens)},
                      {"sources", sources}};
  if (o.tokenizer == "gpt2") m["tokenizer_files"] = {{"vocab", o.vocab}, {"merges", o.merges}};
  // Written last: a directory with a manifest is a complete one. Then the shards are flushed to
  // disk and the directory renamed into place.
  write_file_atomically((work / "manifest.json").string(), m.dump(2) + "\n");
  for (const auto* shards : {&train_shards, &val_shards})
    for (const auto& sh : *shards) fsync_path((work / sh.file).string());
  fsync_path(work.string());
  swap_into_place(work, out, out_has_content);
  guard.release();
  fsync_path(out.parent_path().string());
  sum.replaced = out_has_content;
  sum.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return sum;
}

bool PreparedDirCheck::ok() const {
  for (const auto& s : shards)
    if (!s.ok) return false;
  return true;
}

PreparedDirCheck check_prepared_dir(const std::string& dir) {
  const fs::path d(dir), mpath = d / "manifest.json";
  std::error_code ec;
  if (!fs::is_directory(d, ec)) throw std::runtime_error(dir + ": not a directory");
  if (!fs::exists(mpath, ec))
    throw std::runtime_error(mpath.string() + " not found: " + dir +
                             " is not a loom prep output, or its manifest was deleted (re-run loom prep)");
  require_regular_input(mpath.string(), "the manifest");
  nlohmann::json m;
  try {
    std::ifstream in(mpath);
    m = nlohmann::json::parse(in);
  } catch (const std::exception& e) {
    throw std::runtime_error(mpath.string() + ": cannot parse the manifest: " + e.what());
  }
  PreparedDirCheck r;
  std::vector<std::string> listed;
  for (const char* split : {"train", "val"}) {
    if (!m.contains(split) || !m[split].contains("shards") || !m[split]["shards"].is_array())
      throw std::runtime_error(mpath.string() + ": no '" + split + "' split with a list of shards");
    for (const auto& e : m[split]["shards"]) {
      ShardCheck c;
      c.split = split;
      if (!e.is_object() || !e.contains("file") || !e["file"].is_string() || !e.contains("crc32c") ||
          !e["crc32c"].is_number_unsigned() || !e.contains("tokens") || !e["tokens"].is_number_unsigned())
        throw std::runtime_error(mpath.string() + ": a '" + split +
                                 "' shard entry lacks \"file\", \"tokens\" or \"crc32c\": " + e.dump());
      c.file = e["file"].get<std::string>();
      listed.push_back(c.file);
      const uint64_t want_tokens = e["tokens"].get<uint64_t>();
      const auto want_crc = e["crc32c"].get<uint64_t>();
      try {
        const TokenShard s = open_loom_shard((d / c.file).string());
        const uint32_t got = file_crc32c(*s.file);
        if (s.count != want_tokens)
          c.detail = "the header holds " + std::to_string(s.count) + " tokens, the manifest records " +
                     std::to_string(want_tokens);
        else if (got != want_crc)
          c.detail = "CRC-32C " + crc_hex(got) + ", the manifest records " + crc_hex(uint32_t(want_crc));
        else
          c.ok = true, c.detail = std::to_string(s.count) + " tokens, CRC-32C " + crc_hex(got);
      } catch (const std::exception& ex) {
        c.detail = ex.what();
      }
      r.shards.push_back(std::move(c));
    }
  }
  for (const auto& e : fs::directory_iterator(d)) {
    const std::string name = e.path().filename().string();
    if (e.path().extension() == ".bin" && std::find(listed.begin(), listed.end(), name) == listed.end())
      r.unlisted.push_back(name);
  }
  std::sort(r.unlisted.begin(), r.unlisted.end());
  return r;
}

}  // namespace loom
