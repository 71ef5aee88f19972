#include "engine/metrics/trace_recorder.hpp"

#include <cstdio>
#include <stdexcept>

namespace loom {

TraceRecorder::Span::Span(TraceRecorder* t, const char* name, const char* cat, int64_t arg)
    : t_(t && t->on_ ? t : nullptr), name_(name), cat_(cat), arg_(arg) {
  if (t_) start_us_ = t_->now_us();
}

TraceRecorder::Span::~Span() {
  if (t_) t_->events_.push_back({name_, cat_, start_us_, t_->now_us() - start_us_, arg_});
}

void TraceRecorder::write(const std::string& path) const {
  std::FILE* f = std::fopen(path.c_str(), "w");
  if (!f) throw std::runtime_error(path + ": cannot write the trace (log.dir)");
  std::fprintf(f, "{\"displayTimeUnit\": \"ms\", \"traceEvents\": [\n");
  std::fprintf(f, "{\"name\": \"process_name\", \"ph\": \"M\", \"pid\": %d, \"args\": {\"name\": \"rank %d\"}}", rank_,
               rank_);
  for (const Event& e : events_) {
    std::fprintf(f, ",\n{\"name\": \"%s\", \"cat\": \"%s\", \"ph\": \"X\", \"pid\": %d, \"tid\": 0, \"ts\": %.1f, "
                    "\"dur\": %.1f",
                 e.name, e.cat, rank_, e.ts_us, e.dur_us);
    if (e.arg >= 0) std::fprintf(f, ", \"args\": {\"n\": %lld}", (long long)e.arg);
    std::fprintf(f, "}");
  }
  std::fprintf(f, "\n]}\n");
  if (std::fclose(f) != 0) throw std::runtime_error(path + ": write failed");
}

}  // namespace loom
