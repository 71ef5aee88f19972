#pragma once
// Wraps any Backend and accumulates wall time per op (synchronising the backend around each
// op, so it perturbs GPU timing and is for profiling only). `LOOM_PROFILE_OPS=1 loom train ...`
// prints its table at the end of the run. The ops it times are those of kernels/backend_ops.def.
#include <chrono>
#include <map>
#include <memory>
#include <string>
#include <type_traits>

#include "kernels/backend.hpp"

namespace loom {

class OpTimer final : public Backend {
 public:
  explicit OpTimer(std::unique_ptr<Backend> inner) : in_(std::move(inner)) {}
  // Table of op name, calls, total ms, share of the timed total; sorted by time.
  std::string report() const;
  void reset() { stats_.clear(); }

  std::string name() const override { return in_->name(); }
  double peak_flops(DType compute) override { return in_->peak_flops(compute); }
  std::string precision_note(DType compute) const override { return in_->precision_note(compute); }
  void* alloc_bytes(size_t bytes) override { return in_->alloc_bytes(bytes); }
  void release(void* p) override { in_->release(p); }
  void copy_from_host(void* d, const void* s, size_t bytes) override { in_->copy_from_host(d, s, bytes); }
  void copy_to_host(void* d, const void* s, size_t bytes) override { in_->copy_to_host(d, s, bytes); }
  void* alloc_host_pinned(size_t bytes) override { return in_->alloc_host_pinned(bytes); }
  void release_host_pinned(void* p) override { in_->release_host_pinned(p); }
  void copy_to_host_async(void* d, const void* s, size_t bytes) override { in_->copy_to_host_async(d, s, bytes); }
  void copy_from_host_async(void* d, const void* s, size_t bytes) override { in_->copy_from_host_async(d, s, bytes); }
  void wait_host_copies() override { in_->wait_host_copies(); }
  void synchronize() override { in_->synchronize(); }
  void* stream() override { return in_->stream(); }
  std::string device_pci_bus_id() const override { return in_->device_pci_bus_id(); }
  std::string device_uuid() const override { return in_->device_uuid(); }
  size_t attention_saved_bytes(int B, int T, int NH, DType dtype) const override {
    return in_->attention_saved_bytes(B, T, NH, dtype);
  }
  // Every op of kernels/backend_ops.def, timed under its name.
#define LOOM_OP(RET, NAME, PARAMS, ARGS) \
  RET NAME PARAMS override { return time(#NAME, [&] { return in_->NAME ARGS; }); }
#include "kernels/backend_op_types.inc"
#include "kernels/backend_ops.def"

 private:
  struct Stat {
    long calls = 0;
    double seconds = 0;
  };
  // Runs f between two synchronisations and adds its wall time to `op`; returns what f returns.
  template <typename F>
  auto time(const char* op, F&& f) -> decltype(f()) {
    in_->synchronize();
    const auto t0 = std::chrono::steady_clock::now();
    if constexpr (std::is_void_v<decltype(f())>) {
      f();
      record(op, t0);
    } else {
      auto result = f();
      record(op, t0);
      return result;
    }
  }
  void record(const char* op, std::chrono::steady_clock::time_point t0) {
    in_->synchronize();
    Stat& s = stats_[op];
    s.calls++;
    s.seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  }
  std::unique_ptr<Backend> in_;
  std::map<std::string, Stat> stats_;
};

}  // namespace loom
