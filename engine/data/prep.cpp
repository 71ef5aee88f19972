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
#include "engine/data/prep_output.hpp"
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
    if (!open_) start();
    // A long line goes in by pieces too: its ids (4 bytes per token) are never all held at once.
    for (size_t at = 0; at < line.size(); at += kFlushBytes) {
      text_.append(line, at, kFlushBytes);
      if (text_.size() >= 2 * kFlushBytes) flush_piece();
    }
    if (had_newline) text_ += '\n';
    if (text_.size() >= 2 * kFlushBytes) flush_piece();
  }
  void end_document() {
    if (open_) flush();
    open_ = false;
  }

 private:
  void start() {
    open_ = true;
    searched_ = 0;
    const double u = double(splitmix64(splitmix64(o_.seed) ^ sum_.documents) >> 11) * 0x1.0p-53;
    to_val_ = u < o_.val_fraction;
    ++sum_.documents;
    if (to_val_) ++sum_.val_documents;
    ids_.assign(1, uint32_t(tok_.eot_id()));  // every document starts with end-of-text
  }
  // Where a long document may be cut without changing its ids: 0 if nowhere at or past
  // kFlushBytes. The byte tokenizer encodes byte by byte (anywhere). GPT-2's pre-tokeniser
  // (\s+(?!\S) then \s+ for whitespace, an optional leading space on words) gives the same
  // pre-tokens on both sides of three cuts, each between two non-space characters' surroundings:
  //   "X Y"      before the single space (" Y" starts the next word either way);
  //   "X\nY"     after the newline (a lone "\n" is its own pre-token, at the end of a piece too);
  //   "X\r\nY"   between "\r" and "\n" (whole, "\r\n" before Y splits into "\r" and "\n"; a piece
  //              ending in "\r\n" would keep them together, one ending in "\r" does not).
  // The last such place is taken; positions already searched are not searched again, so a long
  // run without one costs a linear scan.
  size_t safe_cut() {
    if (tok_.name() == "byte") return text_.size();
    const size_t n = text_.size();
    const size_t lo = std::max(kFlushBytes, searched_);
    for (size_t i = n - 1; i > lo; --i) {
      const char c = text_[i];
      if (c != ' ' && c != '\n') continue;
      if (i + 1 >= n || is_space(text_[i + 1])) continue;
      if (c == ' ' && !is_space(text_[i - 1])) return i;
      if (c == '\n' && !is_space(text_[i - 1])) return i + 1;
      if (c == '\n' && text_[i - 1] == '\r' && i >= 2 && !is_space(text_[i - 2])) return i;
    }
    searched_ = n - 2;  // from n - 1 on, a position's follower is not known yet: look again
    return 0;
  }
  // Encodes and writes the document up to its last safe cut, keeping the rest for later.
  void flush_piece() {
    if (const size_t cut = safe_cut(); cut > 0) write_up_to(cut);
  }
  void flush() { write_up_to(text_.size()); }
  void write_up_to(size_t cut) {
    tok_.encode(std::string_view(text_).substr(0, cut), ids_);
    (to_val_ ? val_ : train_).write(ids_.data(), ids_.size());
    ids_.clear();
    text_.erase(0, cut);
    searched_ = 0;
  }

  const Tokenizer& tok_;
  ShardWriter &train_, &val_;
  const PrepOptions& o_;
  PrepSummary& sum_;
  std::string text_;
  size_t searched_ = 0;  // text_ below this holds no safe cut (safe_cut)
  std::vector<uint32_t> ids_;
  bool open_ = false, to_val_ = false;
};

// One line of JSON lines: its object's string at `key` is one document (an empty one adds
// nothing; a blank line is skipped). Anything else is refused, naming the file and line.
void json_document(DocumentSink& sink, const std::string& line, const std::string& file, uint64_t lineno,
                   const std::string& key) {
  if (line.find_first_not_of(" \t\r") == std::string::npos) return;
  const std::string where = file + ":" + std::to_string(lineno) + ": ";
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(line);
  } catch (const std::exception& e) {
    throw std::runtime_error(where + "not a JSON object (--json-key reads JSON lines): " + e.what());
  }
  if (!j.is_object() || !j.contains(key) || !j[key].is_string())
    throw std::runtime_error(where + "no string at \"" + key + "\" (--json-key)" +
                             (j.is_object() ? "" : ": the line is not a JSON object"));
  const std::string& text = j[key].get_ref<const std::string&>();
  if (text.empty()) return;
  sink.append_line(text, false);
  sink.end_document();
}

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

}  // namespace

PrepSummary run_prep(const PrepOptions& o) {
  auto t0 = std::chrono::steady_clock::now();
  if (o.inputs.empty()) throw std::runtime_error("loom prep: no input files");
  if (!(o.val_fraction >= 0 && o.val_fraction < 1))  // NaN too
    throw std::runtime_error("--val-fraction " + std::to_string(o.val_fraction) + ": expected a value in [0, 1)");
  if (o.shard_tokens < 1) throw std::runtime_error("--shard-tokens: expected a positive number");
  for (const auto& in : o.inputs) {
    require_regular_input(in, "text");
    // JSON lines read as plain text would train on their quotes, keys and escapes.
    if (o.json_key.empty() && (in.ends_with(".jsonl") || in.ends_with(".ndjson")))
      throw std::runtime_error(in + " looks like JSON lines: give --json-key KEY (e.g. text; Megatron's --json-keys) "
                               "to take each line's document from that key, or rename the file to read it as text");
  }
  if (!o.json_key.empty() && !o.doc_separator.empty())
    throw std::runtime_error("--json-key and --doc-separator: with JSON lines every line is one document");
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
  if (o.tokenizer != "gpt2" && (!o.vocab.empty() || !o.merges.empty()))
    throw std::runtime_error("--vocab and --merges are GPT-2 BPE's files, but the tokenizer is " + o.tokenizer +
                             ": add --tokenizer gpt2 (or leave them out)");

  // The output: written beside --out and moved in only when complete (prep_output.hpp).
  std::vector<std::string> own_files = o.inputs;
  if (!o.vocab.empty()) own_files.push_back(o.vocab);
  if (!o.merges.empty()) own_files.push_back(o.merges);
  PrepOutput output(o.out, o.force, own_files);
  const fs::path& work = output.work();

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
    for (uint64_t lineno = 1; std::getline(f, line); ++lineno) {
      const bool newline = !f.eof();
      crc = crc32c(line.data(), line.size(), crc);
      if (newline) crc = crc32c("\n", 1, crc);
      bytes += line.size() + (newline ? 1 : 0);
      if (!o.json_key.empty()) {
        json_document(sink, line, in, lineno, o.json_key);
        continue;
      }
      // The separator line, with or without a CR before its newline (a file with CRLF endings).
      const bool separator = !o.doc_separator.empty() &&
                             (line == o.doc_separator || (line.size() == o.doc_separator.size() + 1 &&
                                                          line.back() == '\r' && line.starts_with(o.doc_separator)));
      if (separator) sink.end_document();
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
  if (sum.train_tokens == 0) {
    if (sum.documents > 0 && sum.val_documents == sum.documents)
      throw std::runtime_error("all " + std::to_string(sum.documents) + " document(s) went to the val split " +
                               "(--val-fraction " + std::to_string(o.val_fraction) + "), none to train: give more " +
                               "documents (--doc-separator LINE splits a file into several) or a lower --val-fraction");
    throw std::runtime_error("the inputs hold no text for the train split");
  }

  nlohmann::json m = {{"format", "loom-tokens"},
                      {"version", 1},
                      {"tokenizer", tok->name()},
                      {"vocab_size", tok->vocab_size()},
                      {"eot_id", tok->eot_id()},
                      {"dtype", tok->vocab_size() <= 65536 ? "uint16" : "uint32"},
                      {"documents", sum.documents},
                      {"val_fraction", o.val_fraction},
                      {"doc_separator", o.doc_separator},
                      {"json_key", o.json_key},
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
  sum.replaced = output.commit();
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
  if (!fs::exists(d, ec)) throw std::runtime_error(dir + ": no such directory");
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
