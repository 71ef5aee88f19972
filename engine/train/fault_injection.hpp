#pragma once
// Faults on purpose, for the tests of the run's health guards (never set in a real run):
//   LOOM_FAULT=nan@5,6          the gradients of steps 5 and 6 (1-based) become NaN on rank 0
//   LOOM_FAULT=overflow@5       fp16: step 5 runs with a loss scale of 1e30, so its fp16
//                               gradients overflow in the kernels (the scaler must skip and back off)
//   LOOM_FAULT=sleep@1:4:120    rank 1 sleeps 120 s inside step 4 (a stuck rank)
// Malformed values are an error naming the variable.
#include <cstdint>
#include <cstdlib>
#include <set>
#include <sstream>
#include <stdexcept>
#include <string>

namespace loom {

struct FaultInjection {
  std::set<int64_t> nan_steps;       // 1-based step numbers
  std::set<int64_t> overflow_steps;  // 1-based step numbers
  int sleep_rank = -1;
  int64_t sleep_step = -1;
  double sleep_s = 0;

  static FaultInjection from_env() {
    FaultInjection f;
    const char* v = std::getenv("LOOM_FAULT");
    if (!v || !*v) return f;
    const std::string s = v;
    auto bad = [&] {
      return std::runtime_error("LOOM_FAULT=" + s +
                                ": expected nan@STEP[,STEP...], overflow@STEP[,STEP...] or sleep@RANK:STEP:SECONDS");
    };
    try {
      if (s.rfind("nan@", 0) == 0 || s.rfind("overflow@", 0) == 0) {
        const bool nan = s[0] == 'n';
        std::stringstream in(s.substr(s.find('@') + 1));
        std::string item;
        while (std::getline(in, item, ',')) (nan ? f.nan_steps : f.overflow_steps).insert(std::stoll(item));
      } else if (s.rfind("sleep@", 0) == 0) {
        std::stringstream in(s.substr(6));
        std::string a, b, c;
        if (!std::getline(in, a, ':') || !std::getline(in, b, ':') || !std::getline(in, c)) throw bad();
        f.sleep_rank = std::stoi(a);
        f.sleep_step = std::stoll(b);
        f.sleep_s = std::stod(c);
      } else {
        throw bad();
      }
    } catch (const std::logic_error&) {
      throw bad();
    }
    return f;
  }
};

}  // namespace loom
