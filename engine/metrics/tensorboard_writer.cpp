#include "engine/metrics/tensorboard_writer.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <stdexcept>

#include "engine/util/append_whole.hpp"
#include "engine/util/crc32c.hpp"

namespace loom {
namespace tb {
namespace {

// Protobuf wire format: a key is (field number << 3) | wire type; 0 varint, 1 fixed64,
// 2 length-delimited, 5 fixed32.
void put_varint(std::string& out, uint64_t v) {
  while (v >= 0x80) {
    out.push_back(char(uint8_t(v) | 0x80));
    v >>= 7;
  }
  out.push_back(char(v));
}
void put_key(std::string& out, int field, int wire) { put_varint(out, uint64_t(field) << 3 | uint64_t(wire)); }
template <class T>
void put_fixed(std::string& out, T v) {  // little-endian hosts only (x86-64, aarch64)
  char b[sizeof(T)];
  std::memcpy(b, &v, sizeof(T));
  out.append(b, sizeof(T));
}
void put_bytes(std::string& out, int field, const std::string& bytes) {
  put_key(out, field, 2);
  put_varint(out, bytes.size());
  out += bytes;
}

std::string event_header(double wall_time) {  // Event.wall_time = 1 (double)
  std::string e;
  put_key(e, 1, 1);
  put_fixed(e, wall_time);
  return e;
}
void put_step(std::string& e, int64_t step) {  // Event.step = 2 (int64)
  put_key(e, 2, 0);
  put_varint(e, uint64_t(step));
}

}  // namespace

std::string encode_file_version_event(double wall_time) {
  std::string e = event_header(wall_time);
  put_bytes(e, 3, "brain.Event:2");  // Event.file_version = 3
  return e;
}

std::string encode_scalars_event(double wall_time, int64_t step,
                                 const std::vector<std::pair<std::string, float>>& scalars) {
  std::string summary;
  for (const auto& [tag, value] : scalars) {
    std::string v;
    put_bytes(v, 1, tag);  // Summary.Value.tag = 1
    put_key(v, 2, 5);      // Summary.Value.simple_value = 2 (float)
    put_fixed(v, value);
    put_bytes(summary, 1, v);  // Summary.value = 1 (repeated)
  }
  std::string e = event_header(wall_time);
  put_step(e, step);
  put_bytes(e, 5, summary);  // Event.summary = 5
  return e;
}

std::string encode_session_start_event(double wall_time, int64_t step) {
  std::string log;
  put_key(log, 1, 0);  // SessionLog.status = 1, START = 1
  put_varint(log, 1);
  std::string e = event_header(wall_time);
  put_step(e, step);
  put_bytes(e, 7, log);  // Event.session_log = 7
  return e;
}

uint32_t masked_crc32c(const void* data, size_t n) {
  const uint32_t c = crc32c(data, n);
  return ((c >> 15) | (c << 17)) + 0xa282ead8u;
}

std::string frame_record(const std::string& event) {
  std::string r;
  const uint64_t len = event.size();
  put_fixed(r, len);
  put_fixed(r, masked_crc32c(r.data(), 8));
  r += event;
  put_fixed(r, masked_crc32c(event.data(), event.size()));
  return r;
}

}  // namespace tb

namespace {
double now_s() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}
}  // namespace

TensorBoardWriter::TensorBoardWriter(const std::string& dir, int64_t resume_step) {
  std::filesystem::create_directories(dir);
  // An earlier session's event files: a fresh start (step 0) over them supersedes their points
  // too, as metrics.jsonl's marker says for its rows.
  bool earlier = false;
  for (const auto& e : std::filesystem::directory_iterator(dir))
    earlier = earlier || e.path().filename().string().rfind("events.out.tfevents.", 0) == 0;
  char host[256] = "localhost";
  gethostname(host, sizeof host - 1);
  const double t = now_s();
  // Always a new file, never one that is there: a second writer of this process in the same
  // second (a run restarted in-process) takes the next last field, .1, .2, ...
  for (int k = 0; k < 1000; ++k) {
    char name[400];
    std::snprintf(name, sizeof name, "events.out.tfevents.%010lld.%s.%d.%d", (long long)t, host, int(getpid()), k);
    path_ = (std::filesystem::path(dir) / name).string();
    fd_ = ::open(path_.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    if (fd_ >= 0 || errno != EEXIST) break;
  }
  if (fd_ < 0)
    throw std::runtime_error(path_ + ": cannot create the TensorBoard event file: " + std::strerror(errno) +
                             " (log.dir)");
  try {
    write(tb::encode_file_version_event(t));
    // TensorBoard keeps the points below a START's step (event_accumulator's purge: step < START).
    // Scalars go at the number of steps done, so resume_step's point is the checkpoint's last.
    if (resume_step > 0 || earlier) write(tb::encode_session_start_event(t, resume_step + 1));
  } catch (...) {
    // The destructor will not run: close the file, and remove it (this writer just made it, and
    // it holds no complete step).
    ::close(fd_);
    ::unlink(path_.c_str());
    throw;
  }
}

TensorBoardWriter::~TensorBoardWriter() {
  if (fd_ >= 0) ::close(fd_);
}

void TensorBoardWriter::scalars(int64_t step, const std::vector<std::pair<std::string, double>>& values) {
  std::vector<std::pair<std::string, float>> finite;
  for (const auto& [tag, v] : values)
    if (std::isfinite(v)) finite.emplace_back(tag, float(v));
  write(tb::encode_scalars_event(now_s(), step, finite));
}

// Unbuffered, so TensorBoard sees each step while the run is going. A record is written whole
// or not at all: a torn one would make TensorBoard's reader stop there and hide every later step.
void TensorBoardWriter::write(const std::string& event) {
  append_whole(fd_, size_, tb::frame_record(event), path_, "record");
}

}  // namespace loom
