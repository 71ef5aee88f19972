// Data guards (issues 3, 7, 9, 10, 19): what prep does to an existing --out, special files,
// damaged shards, a prep directory without its manifest, impossible headers.
#include <catch2/catch.hpp>

#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <cmath>
#include <fstream>
#include <nlohmann/json.hpp>

#include "engine/data/mapped_file.hpp"
#include "engine/data/prep.hpp"
#include "engine/data/token_dataset.hpp"
#include "engine/util/crc32c.hpp"
#include "data_test_files.hpp"

using namespace loom;
using namespace loom::test;
using Catch::Matchers::Contains;

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
    fs::copy_file(dir / "ds" / "train_000000.bin", dir / "ds" / "stale_999.bin");  // an old shard must not survive
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
    fs::copy_file(dir / "ds" / "train_000000.bin", dir / "ds" / "more.bin");  // an input that is a shard
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

TEST_CASE("bad prep options are refused with what was meant") {
  auto dir = fresh_dir("prep_options");
  PrepOptions o = small_prep(dir, "out", 'o');
  o.val_fraction = std::nan("");
  CHECK_THAT(error_of([&] { run_prep(o); }), Contains("--val-fraction nan: expected a value in [0, 1)"));
  o = small_prep(dir, "out", 'o');
  o.vocab = "vocab.json";
  CHECK_THAT(error_of([&] { run_prep(o); }), Contains("but the tokenizer is byte: add --tokenizer gpt2"));
  o = small_prep(dir, "out", 'o');
  o.doc_separator = "";  // the whole file is one document, and it goes to val
  o.val_fraction = 0.999999;
  CHECK_THAT(error_of([&] { run_prep(o); }),
             Contains("all 1 document(s) went to the val split") && Contains("--doc-separator LINE"));
  CHECK_FALSE(fs::exists(dir / "out"));
}
