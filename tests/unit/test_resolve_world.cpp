// resolve_world() for a world of fewer than one rank: a ConfigError for every caller (`loom
// config --world 0` used to die of SIGFPE; --world -3 printed negative products).
#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>

#include "engine/config/recipe_io.hpp"

using namespace loom;
using Catch::Matchers::Contains;

TEST_CASE("resolve_world refuses a world of fewer than one rank instead of dividing by zero") {
  const std::string path = std::string(LOOM_TEST_DATA_DIR) + "/../../configs/tiny.yaml";
  for (int world : {0, -3, -2147483647 - 1}) {
    for (const char* dp : {"auto", "1"}) {
      Recipe r = load_recipe(path, {std::string("parallel.dp=") + dp});
      CHECK_THROWS_WITH(resolve_world(r, world),
                        Contains("the world must have at least 1 rank, not " + std::to_string(world)));
    }
  }
  Recipe r = load_recipe(path, {"parallel.dp=auto"});
  resolve_world(r, 2);
  CHECK(r.parallel.dp == 2);
}

TEST_CASE("resolve_world refuses sequences per micro-step past 2^31 - 1 instead of wrapping") {
  const std::string path = std::string(LOOM_TEST_DATA_DIR) + "/../../configs/tiny.yaml";
  // 8 x 536870916 = 2^32 + 32 wrapped to 32, which divided global_batch 32: accepted before.
  Recipe r = load_recipe(path, {"train.micro_batch=8", "train.global_batch=32"});
  CHECK_THROWS_WITH(resolve_world(r, 536870916), Contains("dp=536870916 = 4294967328 sequences per micro-step"));
  Recipe big = load_recipe(path, {});
  CHECK_THROWS_WITH(resolve_world(big, 1000000000), Contains("= 8000000000 sequences per micro-step"));
}
