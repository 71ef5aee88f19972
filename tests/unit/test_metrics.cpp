// TensorBoard event files: byte-exact against records made by TensorBoard's own writer (test
// vectors in ../shared/NOTES.md), and a written file read back record by record. The log.dir
// lock (DirLock) and metrics.jsonl's append-only rules.
#include <catch2/catch.hpp>

#include <csignal>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include "engine/metrics/metrics_log.hpp"
#include "engine/metrics/nvml_probe.hpp"
#include "engine/metrics/tensorboard_writer.hpp"
#include "engine/util/dir_lock.hpp"

using namespace loom;

namespace {
std::string hex(const std::string& bytes) {
  static const char* d = "0123456789abcdef";
  std::string out;
  for (unsigned char c : bytes) {
    out.push_back(d[c >> 4]);
    out.push_back(d[c & 15]);
  }
  return out;
}
}  // namespace

TEST_CASE("TensorBoard records match TensorBoard's own bytes") {
  // The first record of every event file, at wall_time 1700000000.0.
  CHECK(hex(tb::frame_record(tb::encode_file_version_event(1700000000.0))) ==
        "1800000000000000a37f4b220900000040fc54d9411a0d627261696e2e4576656e743a32eced8f9d");
  // A scalar: step 10, tag "loss", 1.5.
  CHECK(hex(tb::encode_scalars_event(1700000000.0, 10, {{"loss", 1.5f}})) ==
        "0900000040fc54d941100a2a0d0a0b0a046c6f7373150000c03f");
  // SessionLog START (status field 1 = 1) at step 20: Event field 7.
  const std::string start = hex(tb::encode_session_start_event(1700000000.0, 20));
  CHECK(start == "0900000040fc54d94110143a020801");
}

namespace {
// The events of a TensorBoard file, each record's framing and checksums checked; `complete` is
// false if the file ends inside a record.
std::vector<std::string> read_events(const std::string& path, bool* complete = nullptr) {
  std::ifstream f(path, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  const std::string all = ss.str();
  std::vector<std::string> events;
  size_t at = 0;
  if (complete) *complete = true;
  while (at < all.size()) {
    uint64_t len = 0;
    if (at + 12 > all.size() || (std::memcpy(&len, all.data() + at, 8), at + 12 + len + 4 > all.size())) {
      if (!complete) FAIL(path + " ends inside a record");
      *complete = false;
      break;
    }
    uint32_t len_crc, data_crc;
    std::memcpy(&len_crc, all.data() + at + 8, 4);
    CHECK(len_crc == tb::masked_crc32c(all.data() + at, 8));
    const std::string ev = all.substr(at + 12, len);
    std::memcpy(&data_crc, all.data() + at + 12 + len, 4);
    CHECK(data_crc == tb::masked_crc32c(ev.data(), ev.size()));
    events.push_back(ev);
    at += 12 + len + 4;
  }
  return events;
}
}  // namespace

TEST_CASE("A TensorBoard event file reads back: framing, checksums, steps and values") {
  const auto dir = std::filesystem::temp_directory_path() / "loom_test_tb";
  std::filesystem::remove_all(dir);
  std::string path;
  {
    // Resumed after 5 steps: this session's first point is step 6 (the number of steps done).
    TensorBoardWriter w(dir.string(), 5);
    w.scalars(6, {{"loss", 2.25}, {"lr", 1e-3}, {"nan_is_skipped", std::nan("")}});
    w.scalars(7, {{"loss", 2.0}});
    path = w.path();
  }
  CHECK(std::filesystem::path(path).filename().string().rfind("events.out.tfevents.", 0) == 0);
  const std::vector<std::string> events = read_events(path);
  REQUIRE(events.size() == 4);  // file_version, session start, two steps
  CHECK(events[0].find("brain.Event:2") != std::string::npos);
  // START at step 6: TensorBoard keeps the earlier session's points below it, step 5 included.
  CHECK(events[1].substr(9) == std::string("\x10\x06\x3a\x02\x08\x01", 6));
  // Step 6 holds loss and lr, not the NaN; same encoding as a single-scalar event.
  CHECK(events[2].substr(9, 2) == std::string("\x10\x06", 2));
  CHECK(events[2].find("loss") != std::string::npos);
  CHECK(events[2].find("lr") != std::string::npos);
  CHECK(events[2].find("nan_is_skipped") == std::string::npos);
  CHECK(events[3].substr(9) == tb::encode_scalars_event(0, 7, {{"loss", 2.0f}}).substr(9));
  std::filesystem::remove_all(dir);
}

TEST_CASE("TensorBoard writers never reuse a file and a later one supersedes the earlier's points") {
  const auto dir = std::filesystem::temp_directory_path() / ("loom_test_tb_new_" + std::to_string(getpid()));
  std::filesystem::remove_all(dir);
  std::string first, second;
  {
    TensorBoardWriter a(dir.string());
    a.scalars(1, {{"loss", 3.0}});
    first = a.path();
    TensorBoardWriter b(dir.string());  // most likely the same second: a new last field
    second = b.path();
  }
  CHECK(first != second);
  CHECK(read_events(first).size() == 2);  // a's step survived b's creation (a: no START, nothing before it)
  // b, a fresh start over a's file: file_version, then a START at step 1 (TensorBoard drops a's
  // points from step 1 on, as metrics.jsonl's marker drops a's rows).
  const std::vector<std::string> events = read_events(second);
  REQUIRE(events.size() == 2);
  CHECK(events[1].substr(9) == std::string("\x10\x01\x3a\x02\x08\x01", 6));
  std::filesystem::remove_all(dir);
}

TEST_CASE("TensorBoard on a full disk: the write throws, naming the file, and no record is torn") {
  const auto dir = std::filesystem::temp_directory_path() / ("loom_test_tb_full_" + std::to_string(getpid()));
  std::filesystem::remove_all(dir);
  TensorBoardWriter w(dir.string());
  w.scalars(1, {{"loss", 3.0}});
  const auto before = std::filesystem::file_size(w.path());
  // The process may write 40 bytes past the file's end: a record of many scalars gets a partial
  // write, then EFBIG, as a disk that fills mid-record would. (SIGXFSZ ignored, limits restored.)
  struct rlimit old_limit {};
  REQUIRE(getrlimit(RLIMIT_FSIZE, &old_limit) == 0);
  const auto old_signal = std::signal(SIGXFSZ, SIG_IGN);
  struct rlimit small = old_limit;
  small.rlim_cur = rlim_t(before + 40);
  REQUIRE(setrlimit(RLIMIT_FSIZE, &small) == 0);
  std::string message;
  try {
    std::vector<std::pair<std::string, double>> many;
    for (int i = 0; i < 20; ++i) many.emplace_back("metric_" + std::to_string(i), i);
    w.scalars(2, many);
  } catch (const std::runtime_error& e) {
    message = e.what();
  }
  setrlimit(RLIMIT_FSIZE, &old_limit);
  std::signal(SIGXFSZ, old_signal);
  CHECK(message.find(w.path() + ": write failed: File too large") != std::string::npos);
  CHECK(std::filesystem::file_size(w.path()) == before);  // cut back to the last whole record
  bool complete = false;
  CHECK(read_events(w.path(), &complete).size() == 2);
  CHECK(complete);
  w.scalars(3, {{"loss", 2.5}});  // room again: later records follow whole ones
  CHECK(read_events(w.path()).size() == 3);
  std::filesystem::remove_all(dir);
}

TEST_CASE("A TensorBoard writer that cannot write its first record throws and leaves no file") {
  const auto dir = std::filesystem::temp_directory_path() / ("loom_test_tb_none_" + std::to_string(getpid()));
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  struct rlimit old_limit {};
  REQUIRE(getrlimit(RLIMIT_FSIZE, &old_limit) == 0);
  const auto old_signal = std::signal(SIGXFSZ, SIG_IGN);
  struct rlimit none = old_limit;
  none.rlim_cur = 0;  // no file may grow at all
  REQUIRE(setrlimit(RLIMIT_FSIZE, &none) == 0);
  std::string message;
  try {
    TensorBoardWriter w(dir.string(), 7);
  } catch (const std::runtime_error& e) {
    message = e.what();
  }
  setrlimit(RLIMIT_FSIZE, &old_limit);
  std::signal(SIGXFSZ, old_signal);
  CHECK(message.find("write failed: File too large") != std::string::npos);
  CHECK(std::filesystem::is_empty(dir));  // the file it made is gone, not left empty
  std::filesystem::remove_all(dir);
}

TEST_CASE("NVML is loaded at run time: absent here means no GPU fields, present means readings") {
  NvmlProbe probe(0);
  if (!probe.available()) {
    // This development machine and CI: no driver, so no libnvidia-ml.so.1. The probe says why and
    // reads nothing, rather than failing to load or crashing.
    CHECK(!probe.why_not().empty());
    const GpuHealth h = probe.read();
    CHECK(h.mem_total_mb == 0);
    CHECK(h.util_pct == 0);
  } else {
    const GpuHealth h = probe.read();
    CHECK(h.mem_total_mb > 1000);  // any datacenter GPU
    CHECK(h.mem_used_mb <= h.mem_total_mb);
    CHECK(h.temp_c > 0);
    CHECK(h.util_pct <= 100);
  }
}

namespace {
std::string slurp(const std::filesystem::path& p) {
  std::ifstream in(p);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}
// Runs `f` in a child process; its exit status (0: f returned true).
template <class F>
int in_child(F f) {
  std::fflush(nullptr);
  const pid_t pid = fork();
  if (pid == 0) _exit(f() ? 0 : 1);
  int st = 0;
  waitpid(pid, &st, 0);
  return WIFEXITED(st) ? WEXITSTATUS(st) : 100;
}
// A pid that is certainly not running: a child that has exited and been reaped.
long dead_pid() {
  std::fflush(nullptr);
  const pid_t pid = fork();
  if (pid == 0) _exit(0);
  waitpid(pid, nullptr, 0);
  return long(pid);
}
std::string hostname() {
  char b[256] = {};
  gethostname(b, sizeof b - 1);
  return b;
}
}  // namespace

TEST_CASE("DirLock: one job per directory, the holder named in the refusal, released on destruction") {
  const auto dir = std::filesystem::temp_directory_path() / ("loom_test_lock_" + std::to_string(getpid()));
  std::filesystem::remove_all(dir);
  {
    DirLock a = DirLock::acquire(dir.string(), "log.dir");
    REQUIRE(a.held());
    CHECK(a.path() == (dir / ".loom.lock").string());
    const std::string text = slurp(dir / ".loom.lock");
    CHECK(text.find("pid: " + std::to_string(getpid()) + "\n") != std::string::npos);
    CHECK(text.find("host: " + hostname() + "\n") != std::string::npos);
    // The same process asking again (checkpoint.dir == log.dir) shares the lock.
    DirLock again = DirLock::acquire(dir.string(), "checkpoint.dir");
    CHECK(again.held());
    // Another process is refused, with the holder's host and pid and the key in the message.
    const long me = long(getpid());
    const int rc = in_child([&] {
      try {
        DirLock::acquire(dir.string(), "log.dir");
        return false;
      } catch (const std::runtime_error& e) {
        const std::string m = e.what();
        return m.find("log.dir=" + dir.string() + " is in use by another Loom job") != std::string::npos &&
               m.find("pid " + std::to_string(me)) != std::string::npos &&
               m.find("host " + hostname()) != std::string::npos && m.find("choose another log.dir") != std::string::npos;
      }
    });
    CHECK(rc == 0);
  }
  // Both handles gone: the lock file is deleted and another process takes the lock.
  CHECK(!std::filesystem::exists(dir / ".loom.lock"));
  CHECK(in_child([&] { return DirLock::acquire(dir.string(), "log.dir").held(); }) == 0);
  std::filesystem::remove_all(dir);
}

TEST_CASE("DirLock: a lock left by a dead process of this host is taken over, another host's is refused") {
  const auto dir = std::filesystem::temp_directory_path() / ("loom_test_stale_" + std::to_string(getpid()));
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  const long dead = dead_pid();
  std::ofstream(dir / ".loom.lock") << "host: " << hostname() << "\npid: " << dead
                                    << "\nstarted: 2026-01-01T00:00:00Z\nslurm_job_id: -\n";
  {
    DirLock l = DirLock::acquire(dir.string(), "log.dir");  // warns on stderr
    CHECK(slurp(dir / ".loom.lock").find("pid: " + std::to_string(getpid())) != std::string::npos);
  }
  std::ofstream(dir / ".loom.lock") << "host: some-other-node\npid: 4242\nstarted: 2026-01-01T00:00:00Z\n";
  try {
    DirLock::acquire(dir.string(), "log.dir");
    FAIL("a lock written on another host was taken");
  } catch (const std::runtime_error& e) {
    const std::string m = e.what();
    CHECK(m.find("another host (host some-other-node, pid 4242") != std::string::npos);
    CHECK(m.find("delete " + (dir / ".loom.lock").string()) != std::string::npos);
  }
  CHECK(std::filesystem::exists(dir / ".loom.lock"));  // refused: left as it was
  std::filesystem::remove_all(dir);
}

namespace {
std::vector<std::string> lines_of(const std::filesystem::path& p) {
  std::ifstream in(p);
  std::vector<std::string> out;
  for (std::string l; std::getline(in, l);) out.push_back(l);
  return out;
}
}  // namespace

TEST_CASE("metrics.jsonl is append-only: sessions add to it, a redo is marked, nothing is deleted") {
  const auto dir = std::filesystem::temp_directory_path() / ("loom_test_mlog_" + std::to_string(getpid()));
  std::filesystem::remove_all(dir);
  const auto file = dir / "metrics.jsonl";
  {
    MetricsLog m(dir.string(), 0);
    for (int s = 0; s < 6; ++s) m.write({{"step", s}, {"loss", 5.0 - s}});
    CHECK(m.session() == 1);
  }
  const std::vector<std::string> first = lines_of(file);
  REQUIRE(first.size() == 6);
  CHECK(first[0] == "{\"step\": 0, \"loss\": 5}");
  {
    // Resumed exactly where the file ends: no marker, the run reads as one.
    MetricsLog m(dir.string(), 6);
    m.write({{"step", 6}, {"loss", -1}});
  }
  CHECK(lines_of(file).size() == 7);
  {
    // Resumed from an older checkpoint (step 3): steps 3..6 are redone. The earlier rows stay;
    // a marker says they are superseded.
    MetricsLog m(dir.string(), 3);
    m.write({{"step", 3}, {"loss", 2.5}});
  }
  std::vector<std::string> all = lines_of(file);
  REQUIRE(all.size() == 9);
  for (size_t i = 0; i < 6; ++i) CHECK(all[i] == first[i]);
  CHECK(all[7] == "{\"session\": 2, \"resumed_at_step\": 3}");  // no run.json here: counted from the file
  CHECK(all[8] == "{\"step\": 3, \"loss\": 2.5}");
  {
    // A fresh start into the same log.dir: appended (with a warning on stderr), not truncated.
    MetricsLog m(dir.string(), 0);
    m.write({{"step", 0}, {"loss", 9}});
  }
  all = lines_of(file);
  REQUIRE(all.size() == 11);
  CHECK(all[9] == "{\"session\": 3, \"resumed_at_step\": 0}");
  // A line cut short by a job that died mid-write is removed (it is not JSON, and the next line
  // would be glued to it); the complete lines before it stay.
  std::ofstream(file, std::ios::app) << "{\"step\": 1, \"lo";
  {
    MetricsLog m(dir.string(), 1);
    m.write({{"step", 1}, {"loss", 8}});
  }
  all = lines_of(file);
  REQUIRE(all.size() == 12);
  CHECK(all[11] == "{\"step\": 1, \"loss\": 8}");
  std::filesystem::remove_all(dir);
}

TEST_CASE("metrics.jsonl on a full disk: the write throws, naming the file and the reason") {
  const auto dir = std::filesystem::temp_directory_path() / ("loom_test_mfull_" + std::to_string(getpid()));
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  std::filesystem::create_symlink("/dev/full", dir / "metrics.jsonl");  // every write: ENOSPC
  MetricsLog m(dir.string(), 0);
  try {
    m.write({{"step", 0}, {"loss", 1}});
    FAIL("a write to a full disk did not throw");
  } catch (const std::runtime_error& e) {
    const std::string msg = e.what();
    CHECK(msg.find((dir / "metrics.jsonl").string()) != std::string::npos);
    CHECK(msg.find("No space left on device") != std::string::npos);
  }
  std::filesystem::remove_all(dir);
}
