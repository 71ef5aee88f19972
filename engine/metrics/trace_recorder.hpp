#pragma once
// A Chrome trace (the JSON "traceEvents" format that chrome://tracing and ui.perfetto.dev open)
// of the phases of a few training steps on one rank: data, forward and backward per
// micro-batch, communication waits, optimizer, checkpoint. Spans are recorded only while
// enabled, into memory; write() saves them.
#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

namespace loom {

class TraceRecorder {
 public:
  explicit TraceRecorder(int rank) : rank_(rank), t0_(std::chrono::steady_clock::now()) {}
  void set_enabled(bool on) { on_ = on; }
  bool enabled() const { return on_; }
  bool empty() const { return events_.empty(); }

  // A complete event from construction to destruction. `name` and `cat` must be literals.
  class Span {
   public:
    Span(TraceRecorder* t, const char* name, const char* cat, int64_t arg = -1);
    ~Span();
    Span(const Span&) = delete;
    Span& operator=(const Span&) = delete;

   private:
    TraceRecorder* t_;
    const char *name_, *cat_;
    int64_t arg_;
    double start_us_ = 0;
  };

  // Writes {"traceEvents": [...]} to `path`, one process per rank (pid = rank) so that the
  // files of all ranks can be loaded together. Throws std::runtime_error naming the file.
  void write(const std::string& path) const;

 private:
  struct Event {
    const char *name, *cat;
    double ts_us, dur_us;
    int64_t arg;
  };
  double now_us() const {
    return std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0_).count();
  }
  int rank_;
  bool on_ = false;
  std::chrono::steady_clock::time_point t0_;
  std::vector<Event> events_;
};

}  // namespace loom
