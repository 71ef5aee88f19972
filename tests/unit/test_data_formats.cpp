// The data formats: `loom prep` round trips (bytes and GPT-2 BPE), the llm.c and Megatron
// readers (files written here from their documented layouts), and the errors for bad input.
#include <catch2/catch.hpp>

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>
#include <utility>

#include "engine/data/mapped_file.hpp"
#include "engine/data/prep.hpp"
#include "engine/data/sampler.hpp"
#include "engine/data/shard_writer.hpp"
#include "engine/data/token_dataset.hpp"
#include "engine/data/tokenizer.hpp"
#include "engine/util/crc32c.hpp"
#include "data_test_files.hpp"

using namespace loom;
using namespace loom::test;
using Catch::Matchers::Contains;

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

namespace {
// This process's resident pages backed by files (the third field of /proc/self/statm is the
// shared pages, which is where read-only file pages count).
size_t resident_file_bytes() {
  std::ifstream f("/proc/self/statm");
  size_t size = 0, resident = 0, shared = 0;
  f >> size >> resident >> shared;
  return shared * size_t(sysconf(_SC_PAGESIZE));
}
}  // namespace

TEST_CASE("a scan of a large shard checks every token and leaves its pages out of the resident set") {
  // 24M tokens (48 MB, two scan pieces and part of a third); one token over the vocabulary at the
  // very end, found by the piecewise scan.
  auto dir = fresh_dir("drop_pages");
  std::vector<uint16_t> toks(size_t(24) << 20);
  for (size_t i = 0; i < toks.size(); ++i) toks[i] = uint16_t((i * 2654435761u) % 50000);
  toks.back() = 60000;
  write_llmc(dir / "big.bin", toks);
  TokenDataset d = open_dataset((dir / "big.bin").string(), "auto", "data.train", "train");
  const size_t before = resident_file_bytes();
  REQUIRE(d.shards.size() == 1);
  CHECK(d.shards[0].max_token() == 60000);
  // Dropped as scanned: far less than the shard's 48 MB stays resident.
  CHECK(resident_file_bytes() < before + (size_t(8) << 20));
  // And read again (from the page cache) with the same values.
  CHECK(d.shards[0].at(0) == toks[0]);
  CHECK(d.shards[0].at(toks.size() / 2) == toks[toks.size() / 2]);
  CHECK(d.shards[0].at(toks.size() - 2) == toks[toks.size() - 2]);
  // The whole file's CRC, likewise.
  const MappedFile& f = *d.shards[0].file;
  const size_t at_crc = resident_file_bytes();
  const uint32_t crc = file_crc32c(f);
  CHECK(resident_file_bytes() < at_crc + (size_t(8) << 20));
  CHECK(file_crc32c(f) == crc);
  // Without dropping, touching every page leaves them resident: the measure can tell.
  volatile unsigned sum = 0;
  for (size_t i = 0; i < f.size(); i += 4096) sum = sum + f.data()[i];
  CHECK(resident_file_bytes() > at_crc + (size_t(40) << 20));
  f.drop_pages(0, f.size());
  CHECK(resident_file_bytes() < at_crc + (size_t(8) << 20));
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

TEST_CASE("a Megatron dataset found by a directory or a glob is read once, not once per half") {
  auto dir = fresh_dir("megatron_once");
  write_megatron(dir / "corpus", {{1, 2, 3}, {4, 5}});
  for (const std::string& p : {dir.string(), (dir / "corpus*").string(), (dir / "*").string()}) {
    INFO(p);
    TokenDataset d = open_dataset(p, "auto", "data.train", "train");
    CHECK(all_tokens(d) == std::vector<uint32_t>{1, 2, 3, 4, 5});
  }
}

// What a checkpoint records of its training data (resume_data.cpp compares it): the token count
// and the CRC-32C of the token bytes, shard after shard (the pieces of one shard: the next case).
TEST_CASE("a dataset's fingerprint is the CRC-32C of its token bytes in shard order") {
  auto dir = fresh_dir("fingerprint");
  // 9M tokens: a 16 MiB scan piece and part of a second; then a small shard.
  std::vector<uint16_t> a(size_t(9) << 20), b(1000);
  for (size_t i = 0; i < a.size(); ++i) a[i] = uint16_t((i * 2654435761u) % 50000);
  for (size_t i = 0; i < b.size(); ++i) b[i] = uint16_t(i % 300);
  write_llmc(dir / "d_000000.bin", a);
  write_llmc(dir / "d_000001.bin", b);
  const TokenDataset d = open_dataset(dir.string(), "auto", "data.train", "train");
  REQUIRE(d.shards.size() == 2);
  const DataFingerprint print = validate_dataset(d, 50257, 16, "data.train");
  CHECK(print.tokens == a.size() + b.size());
  const uint32_t whole = crc32c(b.data(), b.size() * 2, crc32c(a.data(), a.size() * 2));  // little-endian
  CHECK(print.crc32c == whole);
  CHECK(d.shards[0].scan().crc32c == crc32c(a.data(), a.size() * 2));
  // One token changed in place, far into the first piece: another fingerprint, same count.
  a[size_t(5) << 20] ^= 1;
  write_llmc(dir / "d_000000.bin", a);
  const DataFingerprint edited = validate_dataset(open_dataset(dir.string(), "auto", "data.train", "train"), 50257,
                                                  16, "data.train");
  CHECK(edited.tokens == print.tokens);
  CHECK(edited.crc32c != print.crc32c);
}

// TokenShard::scan's own piecing, on shards in memory: the CRC of the token bytes equals one
// plain CRC of the buffer for 1-, 2- and 4-byte tokens, with one piece, an exact multiple of the
// 16 MiB piece, and three pieces (the middle one combined by the fixed-length appender).
TEST_CASE("a shard's scan gives the CRC of its token bytes whatever the token width and piece count") {
  const size_t MiB = size_t(1) << 20;
  for (auto [width, bytes] : {std::pair{1, 32 * MiB + 5}, std::pair{1, 32 * MiB}, std::pair{1, size_t(1000)},
                              std::pair{2, 16 * MiB + 6}, std::pair{4, 48 * MiB + 12}, std::pair{4, size_t(400)}}) {
    INFO(width << "-byte tokens, " << bytes << " bytes");
    std::vector<unsigned char> buf(bytes);
    for (size_t i = 0; i < bytes; ++i) buf[i] = (i % size_t(width)) == 0 ? (unsigned char)(i * 131 / 7) : 0;
    TokenShard s;
    s.tokens = buf.data();
    s.count = bytes / size_t(width);
    s.token_bytes = width;
    const TokenShard::Scan scan = s.scan();
    CHECK(scan.crc32c == crc32c(buf.data(), bytes));
    uint32_t mx = 0;
    for (size_t i = 0; i < s.count; ++i) mx = std::max(mx, s.at(i));
    CHECK(scan.max_token == mx);
  }
}

TEST_CASE("a short last shard gives no sample but does not refuse the dataset") {
  auto dir = fresh_dir("short_last");
  write_llmc(dir / "a_000000.bin", std::vector<uint16_t>(100, 1));
  write_llmc(dir / "a_000001.bin", std::vector<uint16_t>(3, 2));  // what --shard-tokens leaves over
  TokenDataset d = open_dataset(dir.string(), "auto", "data.train", "train");
  validate_dataset(d, 50257, 16, "data.train");
  const SampleIndex index(d.shards, 16);
  CHECK(index.size() == 6);  // (100 - 1) / 16 from the first shard, none from the second
  std::vector<int32_t> tok(16), tgt(16);
  for (uint64_t k = 0; k < index.size(); ++k) {
    index.fill(k, tok.data(), tgt.data());
    CHECK(tok[0] == 1);
  }
}

TEST_CASE("shards of different tokenizers in one dataset are refused whatever their order") {
  auto dir = fresh_dir("mixed_vocab");
  for (const auto& [name, vocab] : {std::pair<std::string, int>{"a", 257}, {"b", 50257}}) {
    fs::create_directories(dir / name);
    ShardWriter w((dir / name).string(), "train", vocab, vocab - 1, 1000);
    std::vector<uint32_t> toks(100, 7);
    w.write(toks.data(), toks.size());
    w.finish();
  }
  fs::copy_file(dir / "a" / "train_000000.bin", dir / "x_byte.bin");
  fs::copy_file(dir / "b" / "train_000000.bin", dir / "y_bpe.bin");
  CHECK_THAT(error_of([&] { open_dataset((dir / "*.bin").string(), "auto", "data.train", "train"); }),
             Contains("mixes tokenizers: ") && Contains("x_byte.bin declares vocab size 257, ") &&
                 Contains("y_bpe.bin 50257"));
  fs::rename(dir / "x_byte.bin", dir / "z_byte.bin");  // the byte shard now sorts last
  CHECK_THAT(error_of([&] { open_dataset((dir / "*.bin").string(), "auto", "data.train", "train"); }),
             Contains("mixes tokenizers: "));
}

TEST_CASE("a FIFO named manifest.json is refused, not opened") {
  auto dir = fresh_dir("fifo_manifest");
  write_llmc(dir / "train_000000.bin", std::vector<uint16_t>(100, 1));
  REQUIRE(::mkfifo((dir / "manifest.json").c_str(), 0600) == 0);
  CHECK_THAT(error_of([&] { open_dataset(dir.string(), "auto", "data.train", "train"); }),
             Contains("manifest.json is a FIFO") && Contains("not a regular file"));
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
  SECTION("llm.c header cut short") {
    write_llmc(dir / "h.bin", std::vector<uint16_t>(100, 1));
    fs::resize_file(dir / "h.bin", 600);
    CHECK_THAT(error_of([&] { open_dataset((dir / "h.bin").string(), "auto", "data.train", "train"); }),
               Contains("truncated llm.c shard: 600 bytes, the header alone needs 1024"));
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
  SECTION("an empty file") {
    std::ofstream(dir / "zero.bin", std::ios::binary);
    CHECK_THAT(error_of([&] { open_dataset((dir / "zero.bin").string(), "auto", "data.train", "train"); }),
               Contains("zero.bin is empty (0 bytes)"));
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

TEST_CASE("CRLF text and long lines are tokenised in pieces too, with the ids of the whole") {
  auto dir = fresh_dir("bpe_crlf");
  const std::string vocab = LOOM_TEST_DATA_DIR "/bpe/vocab.json", merges = LOOM_TEST_DATA_DIR "/bpe/merges.txt";
  auto tok = make_gpt2_tokenizer(vocab, merges);
  std::string crlf, long_line;
  const char* lines[] = {"The quick brown fox.", "", "  indented 42", "trailing  ", "\ttab", "it's"};
  for (int i = 0; crlf.size() < 5'000'000; ++i) crlf += std::string(lines[i % 6]) + " " + std::to_string(i) + "\r\n";
  for (int i = 0; long_line.size() < 5'000'000; ++i) long_line += (i % 11 ? " word" : "  two, spaces") + std::to_string(i % 97);
  for (const auto& [name, text] : {std::pair<std::string, std::string>{"crlf", crlf}, {"long", long_line}}) {
    INFO(name);
    std::ofstream(dir / (name + ".txt"), std::ios::binary) << text;
    for (const std::string t : {"gpt2", "byte"}) {
      PrepOptions o;
      o.tokenizer = t;
      if (t == "gpt2") o.vocab = vocab, o.merges = merges;
      o.out = (dir / (name + "_" + t)).string();
      o.inputs = {(dir / (name + ".txt")).string()};
      const PrepSummary sum = run_prep(o);
      CHECK(sum.documents == 1);
      auto got = all_tokens(open_dataset(o.out, "auto", "data.train", "train"));
      auto whole = t == "gpt2" ? make_gpt2_tokenizer(vocab, merges) : make_byte_tokenizer();
      std::vector<uint32_t> want = {uint32_t(whole->eot_id())};
      whole->encode(text, want);
      CHECK(got.size() == want.size());
      CHECK(got == want);
    }
  }
}

TEST_CASE("a document separator line ending in CRLF separates documents") {
  auto dir = fresh_dir("crlf_sep");
  std::ofstream(dir / "in.txt", std::ios::binary) << "doc one\r\n%\r\ndoc two\r\n%\r\ndoc three\r\n";
  PrepOptions o;
  o.doc_separator = "%";
  o.out = (dir / "out").string();
  o.inputs = {(dir / "in.txt").string()};
  CHECK(run_prep(o).documents == 3);
}
