// The data pipeline: `loom prep` round trips, the llm.c and Megatron readers (files written
// here from their documented layouts), the errors for bad input, and the sampler's promises
// (exact epoch coverage, disjoint ranks, the same global batches for any dp and micro_batch,
// exact resume).
#include <catch2/catch.hpp>

#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>

#include "engine/data/data_loader.hpp"
#include "engine/data/mapped_file.hpp"
#include "engine/data/prep.hpp"
#include "engine/data/sampler.hpp"
#include "engine/data/token_dataset.hpp"
#include "engine/data/tokenizer.hpp"
#include "engine/util/crc32c.hpp"

using namespace loom;
namespace fs = std::filesystem;
using Catch::Matchers::Contains;

namespace {

fs::path fresh_dir(const std::string& name) {
  fs::path d = fs::temp_directory_path() / "loom_test_data" / name;
  fs::remove_all(d);
  fs::create_directories(d);
  return d;
}

template <typename T>
void put(std::ofstream& f, T v) {
  f.write(reinterpret_cast<const char*>(&v), sizeof v);
}

std::vector<uint32_t> all_tokens(const TokenDataset& d) {
  std::vector<uint32_t> out;
  for (const auto& s : d.shards)
    for (size_t i = 0; i < s.count; ++i) out.push_back(s.at(i));
  return out;
}

// llm.c layout: int32 header[256] = {20240520, 1, n, 0...}, then n uint16 tokens.
void write_llmc(const fs::path& p, const std::vector<uint16_t>& toks, int32_t magic = 20240520) {
  std::ofstream f(p, std::ios::binary);
  std::vector<int32_t> h(256, 0);
  h[0] = magic;
  h[1] = 1;
  h[2] = int32_t(toks.size());
  f.write(reinterpret_cast<const char*>(h.data()), 1024);
  f.write(reinterpret_cast<const char*>(toks.data()), std::streamsize(toks.size() * 2));
}

// Megatron layout: PREFIX.idx = "MMIDIDX\0\0", u64 1, u8 dtype (8 = uint16), u64 N, u64 D+1,
// int32 lengths[N], int64 byte pointers[N], int64 document index[D+1]; PREFIX.bin = tokens.
void write_megatron(const fs::path& prefix, const std::vector<std::vector<uint16_t>>& seqs) {
  std::ofstream idx(prefix.string() + ".idx", std::ios::binary), bin(prefix.string() + ".bin", std::ios::binary);
  idx.write("MMIDIDX\0\0", 9);
  put<uint64_t>(idx, 1);
  put<uint8_t>(idx, 8);
  put<uint64_t>(idx, seqs.size());
  put<uint64_t>(idx, seqs.size() + 1);
  for (const auto& s : seqs) put<int32_t>(idx, int32_t(s.size()));
  int64_t ptr = 0;
  for (const auto& s : seqs) {
    put<int64_t>(idx, ptr);
    ptr += int64_t(s.size()) * 2;
  }
  for (size_t d = 0; d <= seqs.size(); ++d) put<int64_t>(idx, int64_t(d));
  for (const auto& s : seqs) bin.write(reinterpret_cast<const char*>(s.data()), std::streamsize(s.size() * 2));
}

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const std::exception& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST_CASE("loom prep round trip: every document, preceded by end-of-text, lands in train or val") {
  auto dir = fresh_dir("prep");
  std::vector<std::string> docs;
  {
    std::ofstream a(dir / "a.txt"), b(dir / "b.txt");
    for (int i = 0; i < 40; ++i) {
      std::string d = "Document " + std::to_string(i) + " says hello.\nSecond line " + std::string(i % 7, 'x') + "\n";
      docs.push_back(d);
      (i < 25 ? a : b) << d << "%\n";
    }
  }
  PrepOptions o;
  o.out = (dir / "out").string();
  o.inputs = {(dir / "a.txt").string(), (dir / "b.txt").string()};
  o.val_fraction = 0.25;
  o.doc_separator = "%";
  o.shard_tokens = 300;  // several shards per split
  PrepSummary s = run_prep(o);
  CHECK(s.documents == 40);
  CHECK(s.val_documents > 0);
  CHECK(s.val_documents < 40);

  TokenDataset train = open_dataset(o.out, "auto", "data.train", "train");
  TokenDataset val = open_dataset(o.out, "auto", "data.val", "val");
  CHECK(train.format == "loom");
  CHECK(train.declared_vocab == 257);
  CHECK(train.shards.size() > 1);
  // Split each stream at the end-of-text tokens and decode the bytes.
  std::multiset<std::string> got;
  for (const auto* d : {&train, &val}) {
    std::string cur;
    bool open = false;
    for (uint32_t t : all_tokens(*d)) {
      if (t == 256) {
        if (open) got.insert(cur);
        cur.clear();
        open = true;
      } else {
        cur += char(t);
      }
    }
    if (open) got.insert(cur);
  }
  CHECK(got == std::multiset<std::string>(docs.begin(), docs.end()));
  CHECK(train.tokens() == s.train_tokens);
  CHECK(val.tokens() == s.val_tokens);

  auto m = nlohmann::json::parse(std::ifstream(fs::path(o.out) / "manifest.json"));
  CHECK(m["tokenizer"] == "byte");
  CHECK(m["sources"].size() == 2);
  CHECK(m["sources"][0]["crc32c"].get<uint32_t>() != 0);
  // The same inputs give the same shards (the val split is a seeded function of the document).
  // Over an existing dataset only with force (docs/data.md).
  o.out = (dir / "out2").string();
  run_prep(o);
  CHECK(all_tokens(open_dataset(o.out, "loom", "data.train", "train")) == all_tokens(train));
}

TEST_CASE("llm.c shards are read, alone, as a directory and as a glob") {
  auto dir = fresh_dir("llmc");
  std::vector<uint16_t> t1(500), t2(300);
  for (size_t i = 0; i < t1.size(); ++i) t1[i] = uint16_t((i * 7) % 50000);
  for (size_t i = 0; i < t2.size(); ++i) t2[i] = uint16_t((i * 13) % 50000);
  write_llmc(dir / "fineweb_train_000001.bin", t1);
  write_llmc(dir / "fineweb_train_000002.bin", t2);
  for (const std::string& path : {(dir / "fineweb_train_000001.bin").string(), dir.string(),
                                  (dir / "fineweb_train_*.bin").string()}) {
    TokenDataset d = open_dataset(path, "auto", "data.train", "train");
    CHECK(d.format == "llmc");
    auto toks = all_tokens(d);
    REQUIRE(toks.size() >= t1.size());
    CHECK(std::equal(t1.begin(), t1.end(), toks.begin()));
    if (path != (dir / "fineweb_train_000001.bin").string()) CHECK(toks.size() == 800);
  }
}

TEST_CASE("Megatron indexed datasets are read as one token stream") {
  auto dir = fresh_dir("megatron");
  std::vector<std::vector<uint16_t>> seqs = {{1, 2, 3}, {4, 5, 6, 7, 8}, {}, {9, 10}};
  write_megatron(dir / "corpus_text_document", seqs);
  for (const std::string& p : {(dir / "corpus_text_document").string(), (dir / "corpus_text_document.bin").string()}) {
    TokenDataset d = open_dataset(p, "auto", "data.train", "train");
    CHECK(d.format == "megatron");
    CHECK(all_tokens(d) == std::vector<uint32_t>{1, 2, 3, 4, 5, 6, 7, 8, 9, 10});
  }
}

TEST_CASE("bad data is reported before training, naming the file and what was expected") {
  auto dir = fresh_dir("bad");
  std::vector<uint16_t> toks(200, 5);
  SECTION("wrong magic") {
    write_llmc(dir / "x.bin", toks, 12345);
    auto msg = error_of([&] { open_dataset((dir / "x.bin").string(), "llmc", "data.train", "train"); });
    CHECK_THAT(msg, Contains("data.train=") && Contains("x.bin") && Contains("first int32 is 12345, expected 20240520"));
  }
  SECTION("truncated llm.c shard") {
    write_llmc(dir / "t.bin", toks);
    fs::resize_file(dir / "t.bin", fs::file_size(dir / "t.bin") - 3);
    auto msg = error_of([&] { open_dataset((dir / "t.bin").string(), "auto", "data.train", "train"); });
    CHECK_THAT(msg, Contains("t.bin") && Contains("truncated"));
  }
  SECTION("truncated Loom shard and Megatron pair") {
    PrepOptions o;
    std::ofstream(dir / "in.txt") << std::string(5000, 'a');
    o.out = (dir / "p").string();
    o.inputs = {(dir / "in.txt").string()};
    run_prep(o);
    fs::resize_file(dir / "p" / "train_000000.bin", 1000);
    CHECK_THAT(error_of([&] { open_dataset(o.out, "auto", "data.train", "train"); }),
               Contains("train_000000.bin") && Contains("truncated"));
    write_megatron(dir / "m", {{1, 2, 3, 4}});
    fs::resize_file(dir / "m.bin", 6);
    CHECK_THAT(error_of([&] { open_dataset((dir / "m").string(), "megatron", "data.train", "train"); }),
               Contains("m.bin") && Contains("truncated"));
  }
  SECTION("token id not below vocab_size") {
    toks[77] = 300;
    write_llmc(dir / "v.bin", toks);
    TokenDataset d = open_dataset((dir / "v.bin").string(), "auto", "data.train", "train");
    CHECK_THAT(error_of([&] { validate_dataset(d, 257, 16, "data.train"); }),
               Contains("v.bin contains token id 300, not below model.vocab_size=257"));
  }
  SECTION("empty shard") {
    write_llmc(dir / "e.bin", {});
    TokenDataset d = open_dataset((dir / "e.bin").string(), "auto", "data.train", "train");
    CHECK_THAT(error_of([&] { validate_dataset(d, 50257, 16, "data.train"); }), Contains("e.bin is empty"));
  }
  SECTION("shard shorter than one sample") {
    write_llmc(dir / "s.bin", std::vector<uint16_t>(10, 1));
    TokenDataset d = open_dataset((dir / "s.bin").string(), "auto", "data.train", "train");
    CHECK_THAT(error_of([&] { validate_dataset(d, 50257, 16, "data.train"); }),
               Contains("s.bin holds 10 tokens, shorter than one sample of seq_len+1 = 17"));
  }
  SECTION("manifest vocabulary differs from the recipe's") {
    std::ofstream(dir / "in.txt") << std::string(5000, 'b');
    PrepOptions o;
    o.out = (dir / "q").string();
    o.inputs = {(dir / "in.txt").string()};
    run_prep(o);
    TokenDataset d = open_dataset(o.out, "auto", "data.train", "train");
    CHECK_THAT(error_of([&] { validate_dataset(d, 50257, 16, "data.train"); }),
               Contains("manifest.json declares vocab size 257 but model.vocab_size is 50257"));
  }
  SECTION("unrecognised format, missing path, empty glob") {
    std::ofstream(dir / "junk.bin", std::ios::binary) << std::string("\x01\x02\x00\x04", 4) << std::string(100, '\0');
    CHECK_THAT(error_of([&] { open_dataset((dir / "junk.bin").string(), "auto", "data.train", "train"); }),
               Contains("junk.bin is not a format Loom recognises"));
    CHECK_THAT(error_of([&] { open_dataset((dir / "nope").string(), "auto", "data.val", "val"); }),
               Contains("data.val=") && Contains("no such file or directory"));
    CHECK_THAT(error_of([&] { open_dataset((dir / "zz_*.bin").string(), "auto", "data.train", "train"); }),
               Contains("the pattern matches no file"));
  }
}

TEST_CASE("epoch permutations are bijections") {
  for (uint64_t n : {1ull, 2ull, 3ull, 17ull, 1000ull, 4097ull}) {
    EpochPermutation p(n, 42, 3);
    std::vector<bool> seen(n, false);
    for (uint64_t i = 0; i < n; ++i) {
      uint64_t j = p(i);
      REQUIRE(j < n);
      REQUIRE_FALSE(seen[j]);
      seen[j] = true;
    }
  }
  // Different epochs shuffle differently.
  EpochPermutation a(1000, 42, 0), b(1000, 42, 1);
  int same = 0;
  for (uint64_t i = 0; i < 1000; ++i) same += a(i) == b(i);
  CHECK(same < 20);
}

namespace {
// A dataset with distinct, recognisable samples: token at position i is i % 997 (+1 per shard).
// Written once per directory: rewriting a file another loader has mapped would pull the pages
// from under it.
TokenDataset counting_dataset(const fs::path& dir) {
  if (fs::exists(dir / "b.bin")) return open_dataset(dir.string(), "llmc", "data.train", "train");
  std::vector<uint16_t> a(1601), b(999);
  for (size_t i = 0; i < a.size(); ++i) a[i] = uint16_t(i % 997);
  for (size_t i = 0; i < b.size(); ++i) b[i] = uint16_t(1 + i % 997);
  write_llmc(dir / "a.bin", a);
  write_llmc(dir / "b.bin", b);
  return open_dataset(dir.string(), "llmc", "data.train", "train");
}
}  // namespace

TEST_CASE("ranks cover each epoch exactly once, disjointly, with the same global batches for any layout") {
  auto dir = fresh_dir("sampler");
  const int T = 16, GB = 8;
  // Concatenate every rank's share of each step, rank by rank: the global batch.
  auto global_batches = [&](int dp, int B, int steps) {
    std::vector<std::vector<int32_t>> out(static_cast<size_t>(steps));
    for (int r = 0; r < dp; ++r) {
      DataLoader dl(counting_dataset(dir), LoaderLayout{T, B, GB / (B * dp), r, dp, 7});
      for (int s = 0; s < steps; ++s) {
        StepBatch b = dl.next();
        out[size_t(s)].insert(out[size_t(s)].end(), b.tokens.begin(), b.tokens.end());
      }
    }
    return out;
  };
  const int steps = 40;
  auto ref = global_batches(1, 4, steps);
  CHECK(global_batches(2, 4, steps) == ref);
  CHECK(global_batches(4, 2, steps) == ref);
  CHECK(global_batches(2, 1, steps) == ref);
  CHECK(global_batches(1, 8, steps) == ref);

  // Exact coverage: the first S positions hold every sample once, whatever the layout, and the
  // shares of one step never overlap.
  DataLoader one(counting_dataset(dir), LoaderLayout{T, 4, 2, 0, 1, 7});
  const uint64_t S = one.samples_per_epoch();
  CHECK(S == 1600 / 16 + 998 / 16);
  std::vector<int> count(S, 0);
  for (uint64_t p = 0; p < S; ++p) count[one.sample_at(p)]++;
  CHECK(std::all_of(count.begin(), count.end(), [](int c) { return c == 1; }));
  for (int dp : {2, 4}) {
    std::set<uint64_t> seen;
    for (int r = 0; r < dp; ++r)
      for (int i = 0; i < GB / dp; ++i) seen.insert(one.sample_at(uint64_t(r) * (GB / dp) + i));
    CHECK(seen.size() == size_t(GB));
  }
}

TEST_CASE("a loader resumed from its state continues with exactly the following batches") {
  auto dir = fresh_dir("resume");
  LoaderLayout layout{16, 2, 2, 1, 2, 99};
  DataLoader a(counting_dataset(dir), layout);
  std::vector<StepBatch> seq;
  for (int s = 0; s < 30; ++s) seq.push_back(a.next());  // crosses an epoch boundary (S = 162, 4 per step per rank)
  DataLoader first(counting_dataset(dir), layout);
  for (int s = 0; s < 17; ++s) first.next();
  LoaderState st = first.state();
  CHECK(st.next_step == 17);
  DataLoader resumed(counting_dataset(dir), layout, 2, st);
  for (int s = 17; s < 30; ++s) CHECK(resumed.next().tokens == seq[size_t(s)].tokens);
}

TEST_CASE("a long document tokenised in pieces gives the ids of encoding it whole (GPT-2 BPE)") {
  auto dir = fresh_dir("bpe_stream");
  // ~2.5 MB in one document, with the whitespace patterns that make cutting risky: blank lines,
  // indented lines, trailing spaces, tabs.
  std::string text;
  const char* lines[] = {"The quick brown fox jumps over the lazy dog.", "", "  indented line with 'quotes' and 42",
                         "trailing spaces   ", "\ttabbed", "Don't stop; it's fine, they'll say.", "UPPER CASE 'S"};
  for (int i = 0; text.size() < 2'500'000; ++i) text += std::string(lines[i % 7]) + " " + std::to_string(i) + "\n";
  std::ofstream(dir / "one.txt", std::ios::binary) << text;
  const std::string vocab = LOOM_TEST_DATA_DIR "/bpe/vocab.json", merges = LOOM_TEST_DATA_DIR "/bpe/merges.txt";
  PrepOptions o;
  o.tokenizer = "gpt2";
  o.vocab = vocab;
  o.merges = merges;
  o.out = (dir / "out").string();
  o.inputs = {(dir / "one.txt").string()};
  run_prep(o);
  auto got = all_tokens(open_dataset(o.out, "auto", "data.train", "train"));
  auto tok = make_gpt2_tokenizer(vocab, merges);
  std::vector<uint32_t> want = {uint32_t(tok->eot_id())};
  tok->encode(text, want);
  CHECK(got.size() == want.size());
  CHECK(got == want);
}

TEST_CASE("CRC-32C matches the standard check value, in one call or in pieces") {
  // crc32c("123456789") = 0xE3069283 (the Castagnoli check value); TensorBoard relies on it too.
  const std::string s = "123456789";
  CHECK(crc32c(s.data(), s.size()) == 0xE3069283u);
  std::string big(100003, '\0');
  for (size_t i = 0; i < big.size(); ++i) big[i] = char(i * 7 + 3);
  const uint32_t whole = crc32c(big.data(), big.size());
  uint32_t pieces = 0;
  for (size_t off = 0; off < big.size(); off += 4097)
    pieces = crc32c(big.data() + off, std::min<size_t>(4097, big.size() - off), pieces);
  CHECK(pieces == whole);
}

TEST_CASE("CRC-32C of pieces combines into the CRC of the whole without the bytes") {
  std::string big(300007, '\0');
  uint64_t x = 12345;
  for (auto& c : big) c = char((x = x * 6364136223846793005ull + 1442695040888963407ull) >> 56);
  const uint32_t whole = crc32c(big.data(), big.size());
  // Cuts of every kind of length: empty, one byte, odd, powers of two, most of the buffer.
  for (size_t cut : {size_t(0), size_t(1), size_t(7), size_t(4096), size_t(65536), size_t(299999), big.size()}) {
    const uint32_t a = crc32c(big.data(), cut), b = crc32c(big.data() + cut, big.size() - cut);
    CHECK(crc32c_combine(a, b, big.size() - cut) == whole);
  }
  // Equal-length pieces in order, as the checkpoint assembles a column-split tensor row by row.
  const size_t len = 1000;
  const Crc32cAppender append(len);
  uint32_t crc = crc32c(big.data(), 7);
  for (size_t off = 7; off + len <= big.size(); off += len) {
    crc = append(crc, crc32c(big.data() + off, len));
    CHECK(crc == crc32c(big.data(), off + len));
    if (off > 20000) break;
  }
  // A changed byte changes the combined value.
  std::string bad = big;
  bad[150000] ^= 1;
  CHECK(crc32c_combine(crc32c(bad.data(), 150001), crc32c(bad.data() + 150001, bad.size() - 150001),
                       bad.size() - 150001) != whole);
}

// ---------------------------------------------------------------------------------------------
// Guards (issues 3, 7, 9, 10, 19): what prep does to an existing --out, special files, damaged
// shards, a prep directory without its manifest, impossible headers.

namespace {

std::vector<std::string> names_in(const fs::path& dir) {
  std::vector<std::string> out;
  for (const auto& e : fs::directory_iterator(dir)) out.push_back(e.path().filename().string());
  std::sort(out.begin(), out.end());
  return out;
}

// A byte-tokenised prep of `text` (40 '%'-separated documents) into `out`.
PrepOptions small_prep(const fs::path& dir, const std::string& out, char fill, bool force = false) {
  {
    std::ofstream f(dir / (std::string("in_") + fill + ".txt"));
    for (int i = 0; i < 40; ++i) f << "document " << i << " " << std::string(50 + i, fill) << "\n%\n";
  }
  PrepOptions o;
  o.out = (dir / out).string();
  o.inputs = {(dir / (std::string("in_") + fill + ".txt")).string()};
  o.val_fraction = 0.2;
  o.doc_separator = "%";
  o.shard_tokens = 500;
  o.force = force;
  return o;
}

std::string read_all(const fs::path& p) {
  std::ifstream f(p, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(f), {});
}

void flip_byte(const fs::path& p, size_t offset) {
  std::fstream f(p, std::ios::in | std::ios::out | std::ios::binary);
  f.seekg(std::streamoff(offset));
  char c = 0;
  f.get(c);
  f.seekp(std::streamoff(offset));
  f.put(char(c ^ 0x10));
}

}  // namespace

TEST_CASE("loom prep refuses a non-empty --out without force, and with force swaps the new dataset in whole") {
  auto dir = fresh_dir("prep_out");
  PrepOptions a = small_prep(dir, "ds", 'a');
  run_prep(a);
  // Written aside and renamed into place: nothing else is left next to it.
  CHECK(names_in(dir) == std::vector<std::string>{"ds", "in_a.txt"});
  const auto before = names_in(dir / "ds");
  CHECK(std::count(before.begin(), before.end(), "manifest.json") == 1);
  const std::string shard0 = read_all(dir / "ds" / "train_000000.bin");
  const auto tokens_a = all_tokens(open_dataset(a.out, "auto", "data.train", "train"));

  SECTION("an existing dataset is kept, untouched, without force") {
    PrepOptions b = small_prep(dir, "ds", 'b');
    CHECK_THAT(error_of([&] { run_prep(b); }),
               Contains("--out " + b.out + " already holds a prepared dataset (manifest.json, ") &&
                   Contains("shard files") && Contains("pass --force to replace it"));
    CHECK(names_in(dir / "ds") == before);
    CHECK(read_all(dir / "ds" / "train_000000.bin") == shard0);
    // Shards without a manifest (an interrupted older prep) count as a dataset too.
    fs::remove(dir / "ds" / "manifest.json");
    CHECK_THAT(error_of([&] { run_prep(b); }), Contains("already holds a prepared dataset (") && Contains("--force"));
  }
  SECTION("any other non-empty directory is refused; an empty one is used") {
    fs::create_directories(dir / "notes");
    std::ofstream(dir / "notes" / "todo.txt") << "keep me\n";
    PrepOptions b = small_prep(dir, "notes", 'b');
    CHECK_THAT(error_of([&] { run_prep(b); }),
               Contains("is not empty (1 entry, e.g. 'todo.txt')") && Contains("--force"));
    CHECK(read_all(dir / "notes" / "todo.txt") == "keep me\n");
    fs::create_directories(dir / "empty");
    PrepOptions c = small_prep(dir, "empty", 'c');
    run_prep(c);
    CHECK(fs::exists(dir / "empty" / "manifest.json"));
    std::ofstream(dir / "file") << "x";
    PrepOptions d = small_prep(dir, "file", 'd', true);
    CHECK_THAT(error_of([&] { run_prep(d); }), Contains("exists and is not a directory"));
  }
  SECTION("force replaces the dataset and leaves no partial or old directory") {
    PrepOptions b = small_prep(dir, "ds/", 'b', true);  // a trailing slash names the same directory
    std::ofstream(dir / "ds" / "stale_999.bin") << "old";  // an old file must not survive
    PrepSummary s = run_prep(b);
    CHECK(s.replaced);
    auto m = nlohmann::json::parse(std::ifstream(dir / "ds" / "manifest.json"));
    CHECK_THAT(m["sources"][0]["path"].get<std::string>(), Contains("in_b.txt"));
    CHECK_FALSE(fs::exists(dir / "ds" / "stale_999.bin"));
    CHECK(all_tokens(open_dataset(b.out, "auto", "data.train", "train")) != tokens_a);
    CHECK(names_in(dir) == std::vector<std::string>{"ds", "in_a.txt", "in_b.txt"});
  }
  SECTION("a prep that fails with force leaves the old dataset as it was") {
    std::ofstream(dir / "empty.txt");  // no text: "no text for the train split", after writing
    PrepOptions b = small_prep(dir, "ds", 'b', true);
    b.inputs = {(dir / "empty.txt").string()};
    CHECK_THAT(error_of([&] { run_prep(b); }), Contains("no text for the train split"));
    CHECK(names_in(dir / "ds") == before);
    CHECK(read_all(dir / "ds" / "train_000000.bin") == shard0);
    CHECK(names_in(dir) == std::vector<std::string>{"ds", "empty.txt", "in_a.txt", "in_b.txt"});
  }
  SECTION("force refuses to replace a directory holding one of its inputs, or anything not a dataset") {
    std::ofstream(dir / "ds" / "inside.txt") << "text\n";
    PrepOptions b = small_prep(dir, "ds", 'b', true);
    b.inputs = {(dir / "ds" / "inside.txt").string()};
    CHECK_THAT(error_of([&] { run_prep(b); }), Contains("holds files that are not a prepared dataset"));
    CHECK(fs::exists(dir / "ds" / "inside.txt"));
    fs::remove(dir / "ds" / "inside.txt");
    std::ofstream(dir / "ds" / "more.bin") << "text\n";  // an input that looks like a shard
    b.inputs = {(dir / "ds" / "more.bin").string()};
    CHECK_THAT(error_of([&] { run_prep(b); }), Contains("more.bin lies inside the directory that --force would replace"));
    CHECK(fs::exists(dir / "ds" / "more.bin"));
  }
}

TEST_CASE("FIFOs, sockets and devices are refused by name, never opened (no hang)") {
  auto dir = fresh_dir("special");
  const std::string fifo = (dir / "pipe.bin").string();
  REQUIRE(::mkfifo(fifo.c_str(), 0600) == 0);
  // Opening a FIFO for reading would block until a writer comes: each of these must return.
  CHECK_THAT(error_of([&] { MappedFile f(fifo); }), Contains("pipe.bin is a FIFO (named pipe), not a regular file"));
  CHECK_THAT(error_of([&] { open_dataset(fifo, "auto", "data.train", "train"); }),
             Contains("data.train=" + fifo) && Contains("pipe.bin is a FIFO (named pipe), not a regular file"));
  CHECK_THAT(error_of([&] { open_dataset(fifo, "llmc", "data.val", "val"); }),
             Contains("data.val=") && Contains("is a FIFO"));
  CHECK_THAT(error_of([&] { open_dataset("/dev/null", "auto", "data.train", "train"); }),
             Contains("/dev/null is a character device, not a regular file"));
  // In a directory listing and in a glob too (refused, like an explicitly named one).
  write_llmc(dir / "a.bin", std::vector<uint16_t>(100, 1));
  CHECK_THAT(error_of([&] { open_dataset(dir.string(), "auto", "data.train", "train"); }),
             Contains("pipe.bin is a FIFO"));
  CHECK_THAT(error_of([&] { open_dataset((dir / "*.bin").string(), "auto", "data.train", "train"); }),
             Contains("pipe.bin is a FIFO"));
  fs::remove(fifo);
  const std::string sock = (dir / "s.bin").string();
  int fd = ::socket(AF_UNIX, SOCK_STREAM, 0);
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::strncpy(addr.sun_path, sock.c_str(), sizeof addr.sun_path - 1);
  REQUIRE(::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0);
  CHECK_THAT(error_of([&] { open_dataset(dir.string(), "auto", "data.train", "train"); }),
             Contains("s.bin is a socket, not a regular file"));
  ::close(fd);
  fs::remove(sock);
  fs::create_symlink(dir / "gone.bin", dir / "dangling.bin");
  CHECK_THAT(error_of([&] { open_dataset(dir.string(), "auto", "data.train", "train"); }),
             Contains("dangling.bin is a broken symbolic link"));
  fs::remove(dir / "dangling.bin");
  fs::create_directories(dir / "sub");  // subdirectories of a listed directory are skipped
  CHECK(open_dataset(dir.string(), "auto", "data.train", "train").shards.size() == 1);

  // loom prep: its inputs, vocab and merges.
  REQUIRE(::mkfifo(fifo.c_str(), 0600) == 0);
  PrepOptions o;
  o.out = (dir / "out").string();
  o.inputs = {fifo};
  CHECK_THAT(error_of([&] { run_prep(o); }),
             Contains(fifo + " is a FIFO (named pipe), not a regular file; loom prep reads text"));
  std::ofstream(dir / "in.txt") << "hello\n";
  o.inputs = {(dir / "in.txt").string()};
  o.tokenizer = "gpt2";
  o.vocab = fifo;
  o.merges = LOOM_TEST_DATA_DIR "/bpe/merges.txt";
  CHECK_THAT(error_of([&] { run_prep(o); }), Contains(fifo + " is a FIFO") && Contains("(--vocab)"));
  CHECK_FALSE(fs::exists(dir / "out"));
}

TEST_CASE("a damaged shard of a prep directory is found when it is opened, and by check_prepared_dir") {
  auto dir = fresh_dir("crc");
  PrepOptions o = small_prep(dir, "ds", 'a');
  run_prep(o);
  const fs::path ds = dir / "ds";
  auto m = nlohmann::json::parse(std::ifstream(ds / "manifest.json"));
  REQUIRE(m["train"]["shards"].size() >= 2);
  const auto crc_hex = [](uint32_t c) {
    char b[16];
    std::snprintf(b, sizeof b, "0x%08x", c);
    return std::string(b);
  };
  const uint32_t recorded = m["train"]["shards"][1]["crc32c"].get<uint32_t>();
  CHECK(check_prepared_dir(ds.string()).ok());
  flip_byte(ds / "train_000001.bin", 100);  // a token byte: the header stays valid
  const uint32_t actual = crc32c(read_all(ds / "train_000001.bin").data(), fs::file_size(ds / "train_000001.bin"));
  CHECK_THAT(error_of([&] { open_dataset(ds.string(), "auto", "data.train", "train"); }),
             Contains("data.train=" + ds.string()) && Contains("train_000001.bin: CRC-32C mismatch: the file's is " +
                                                                crc_hex(actual) + ", ") &&
                 Contains("manifest.json records " + crc_hex(recorded)) && Contains("loom prep --check"));
  // The val split's shards are intact: it opens.
  CHECK(open_dataset(ds.string(), "auto", "data.val", "val").tokens() == m["val"]["tokens"].get<size_t>());

  fs::resize_file(ds / "val_000000.bin", 40);
  PreparedDirCheck c = check_prepared_dir(ds.string());
  CHECK_FALSE(c.ok());
  for (const auto& s : c.shards) {
    INFO(s.split << " " << s.file << ": " << s.detail);
    if (s.file == "train_000001.bin") {
      CHECK_FALSE(s.ok);
      CHECK(s.detail == "CRC-32C " + crc_hex(actual) + ", the manifest records " + crc_hex(recorded));
    } else if (s.file == "val_000000.bin") {
      CHECK_FALSE(s.ok);
      CHECK_THAT(s.detail, Contains("truncated Loom shard: 40 bytes"));
    } else {
      CHECK(s.ok);
      CHECK_THAT(s.detail, Contains("tokens, CRC-32C 0x"));
    }
  }
  std::ofstream(ds / "train_000099.bin") << "x";
  CHECK(check_prepared_dir(ds.string()).unlisted == std::vector<std::string>{"train_000099.bin"});
  fs::remove(ds / "manifest.json");
  CHECK_THAT(error_of([&] { check_prepared_dir(ds.string()); }), Contains("manifest.json not found"));
}

TEST_CASE("the CRC of a large mapped file, computed in parallel pieces, is the CRC of the whole") {
  auto dir = fresh_dir("crc_big");
  std::string big((size_t(33) << 20) + 5, '\0');
  uint64_t x = 7;
  for (auto& c : big) c = char((x = x * 6364136223846793005ull + 1442695040888963407ull) >> 56);
  std::ofstream(dir / "big", std::ios::binary) << big;
  MappedFile f((dir / "big").string());
  CHECK(file_crc32c(f) == crc32c(big.data(), big.size()));
}

TEST_CASE("a prep directory without its manifest is refused instead of mixing train and val") {
  auto dir = fresh_dir("nomanifest");
  PrepOptions o = small_prep(dir, "ds", 'a');
  run_prep(o);
  fs::remove(dir / "ds" / "manifest.json");
  for (const char* key : {"data.train", "data.val"})
    CHECK_THAT(error_of([&] { open_dataset(o.out, "auto", key, "train"); }),
               Contains(std::string(key) + "=" + o.out) && Contains("manifest.json is missing") &&
                   Contains("data.train=" + o.out + "/train_*.bin, data.val=" + o.out + "/val_*.bin") &&
                   Contains("re-run loom prep"));
  // Named explicitly, each split opens.
  CHECK(open_dataset(o.out + "/train_*.bin", "auto", "data.train", "train").shards.size() >= 2);
  CHECK(open_dataset(o.out + "/val_*.bin", "auto", "data.val", "val").format == "loom");
  // llm.c's layout (fineweb_train_*.bin next to fineweb_val_*.bin) has the same trap.
  fs::create_directories(dir / "fw");
  write_llmc(dir / "fw" / "fineweb_train_000001.bin", std::vector<uint16_t>(100, 1));
  write_llmc(dir / "fw" / "train_val_mix.bin", std::vector<uint16_t>(100, 1));  // both parts: neither split
  CHECK(open_dataset((dir / "fw").string(), "auto", "data.train", "train").shards.size() == 2);
  write_llmc(dir / "fw" / "fineweb_val_000000.bin", std::vector<uint16_t>(100, 2));
  CHECK_THAT(error_of([&] { open_dataset((dir / "fw").string(), "auto", "data.train", "train"); }),
             Contains("holds both training and validation files (fineweb_train_000001.bin, fineweb_val_000000.bin)") &&
                 Contains("/*train*.bin"));
}

TEST_CASE("impossible headers: a short shard, a printable magic, counts that overflow") {
  auto dir = fresh_dir("headers");
  SECTION("a 30-byte Loom shard is truncated, not a wrong magic") {
    std::ofstream(dir / "short.bin", std::ios::binary) << std::string("LOOMTOKS") << std::string(22, '\0');
    CHECK_THAT(error_of([&] { open_dataset((dir / "short.bin").string(), "auto", "data.train", "train"); }),
               Contains("short.bin: truncated Loom shard: 30 bytes, the header alone needs 64"));
  }
  SECTION("a magic is printed as text when it is printable, as hex otherwise") {
    std::ofstream(dir / "t.bin", std::ios::binary) << std::string("HELLOWORLD") << std::string(100, '\0');
    CHECK_THAT(error_of([&] { open_dataset((dir / "t.bin").string(), "loom", "data.train", "train"); }),
               Contains("magic \"HELLOWOR\", expected \"LOOMTOKS\""));
    std::ofstream(dir / "h.bin", std::ios::binary) << std::string("\x01\x02\xff\x04xyzw", 8) << std::string(100, 'a');
    CHECK_THAT(error_of([&] { open_dataset((dir / "h.bin").string(), "loom", "data.train", "train"); }),
               Contains("magic 0x0102ff0478797a77, expected"));
    std::ofstream(dir / "tiny.bin", std::ios::binary) << "LOOM";
    CHECK_THAT(error_of([&] { open_dataset((dir / "tiny.bin").string(), "loom", "data.train", "train"); }),
               Contains("magic \"LOOM\" (the file is only 4 bytes)"));
    CHECK_THAT(error_of([&] { open_dataset((dir / "t.bin").string(), "llmc", "data.train", "train"); }),
               Contains("first int32 is 1280066888 (\"HELL\"), expected 20240520"));
    std::ofstream(dir / "m.idx", std::ios::binary) << std::string("MMIDIDX\0\1", 9) << std::string(40, '\0');
    std::ofstream(dir / "m.bin", std::ios::binary);
    CHECK_THAT(error_of([&] { open_dataset((dir / "m").string(), "megatron", "data.train", "train"); }),
               Contains("magic 0x4d4d49444944580001"));
  }
  SECTION("a Loom header count of 2^63 is impossible for the file, without overflow") {
    std::ofstream f(dir / "big.bin", std::ios::binary);
    f.write(kLoomShardMagic, 8);
    put<uint32_t>(f, 1);
    put<uint32_t>(f, 2);
    put<uint64_t>(f, uint64_t(1) << 63);  // 2^63 tokens x 2 bytes wraps to 0: the old size check passed
    put<uint32_t>(f, 257);
    put<uint32_t>(f, 256);
    f << std::string(32, '\0');
    f.close();
    REQUIRE(fs::file_size(dir / "big.bin") == 64);
    CHECK_THAT(error_of([&] { open_dataset((dir / "big.bin").string(), "auto", "data.train", "train"); }),
               Contains("the header's token count 9223372036854775808 is impossible for a file of 64 bytes"));
  }
  SECTION("a Megatron index whose counts overflow is refused before any read") {
    // nseq = 2^62: 12 nseq wraps to 0, so fixed + 12 nseq + 8 ndoc "matched" a 34-byte file and the
    // loop read 2^62 lengths past its end.
    std::ofstream idx(dir / "w.idx", std::ios::binary);
    idx.write("MMIDIDX\0\0", 9);
    put<uint64_t>(idx, 1);
    put<uint8_t>(idx, 8);
    put<uint64_t>(idx, uint64_t(1) << 62);
    put<uint64_t>(idx, 0);
    idx.close();
    std::ofstream(dir / "w.bin", std::ios::binary);
    CHECK_THAT(error_of([&] { open_dataset((dir / "w").string(), "megatron", "data.train", "train"); }),
               Contains("w.idx: the index's counts (4611686018427387904 sequences, 0 document entries) are "
                        "impossible for a file of 34 bytes"));
  }
}
