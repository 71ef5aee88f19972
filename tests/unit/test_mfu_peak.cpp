// LOOM_PEAK_TFLOPS's parsing (engine/train/mfu_peak.hpp): a positive, finite number of TFLOP/s
// or an error naming the variable; unset is the backend's own figure.
#include <catch2/catch.hpp>

#include <stdexcept>
#include <string>

#include "engine/train/mfu_peak.hpp"

using namespace loom;

TEST_CASE("LOOM_PEAK_TFLOPS parses TFLOP/s and refuses anything else", "[mfu]") {
  CHECK(parse_peak_tflops("") == 0);  // not set
  CHECK(parse_peak_tflops("0.5") == Approx(5e11));
  CHECK(parse_peak_tflops("989") == Approx(9.89e14));
  CHECK(parse_peak_tflops("1e-3") == Approx(1e9));
  for (const char* bad : {"0", "-1", "fast", "nan", "inf", "-inf", "1e300", "5 ", "5x", " ", "1e-400"}) {
    INFO("LOOM_PEAK_TFLOPS=" << bad);
    try {
      parse_peak_tflops(bad);
      FAIL("accepted");
    } catch (const std::runtime_error& e) {
      CHECK(std::string(e.what()).find("LOOM_PEAK_TFLOPS='" + std::string(bad) + "'") == 0);
    }
  }
}
