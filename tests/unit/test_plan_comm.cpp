// `loom plan`'s data-parallel communication (engine/plan/plan.cpp, docs/plan.md "Time per step"):
// the volume follows parallel.grad_reduce_dtype, and the parameter all-gathers that come once per
// step (ZeRO-1 and ZeRO-2, after the optimizer) are charged once, not once per micro-batch. The
// volumes are also checked against real runs' comm_wire_mb by mpi_comm_volume_matches_theory.
#include <catch2/catch.hpp>

#include <string>
#include <vector>

#include "engine/config/recipe_io.hpp"
#include "engine/plan/plan.hpp"

namespace {
loom::Prediction plan_124m(const std::vector<std::string>& sets) {
  const std::string path = std::string(LOOM_TEST_DATA_DIR) + "/../../configs/gpt2-124m.yaml";
  std::vector<std::string> all = {"parallel.tp=1", "parallel.pp=1", "parallel.dp=16", "train.micro_batch=16"};
  all.insert(all.end(), sets.begin(), sets.end());
  const loom::Recipe r = loom::load_recipe(path, all);
  return loom::predict(r, loom::Cluster{2, 8, loom::device_spec("a100-40g")});
}
}  // namespace

TEST_CASE("plan - bf16 gradient reduction halves the gradients' bytes") {
  const double P = double(plan_124m({"train.global_batch=256"}).dp_bytes) / 2 / (15.0 / 16);  // fp32 grads
  CHECK(plan_124m({"train.global_batch=256", "parallel.grad_reduce_dtype=bf16"}).dp_bytes ==
        Approx(2 * 15.0 / 16 * P / 2));
  // ZeRO-1: the gradients reduce-scattered in bf16, the updated parameters all-gathered in fp32.
  CHECK(plan_124m({"train.global_batch=256", "parallel.zero=1", "parallel.grad_reduce_dtype=bf16"}).dp_bytes ==
        Approx(15.0 / 16 * (P / 2 + P)));
  CHECK(plan_124m({"train.global_batch=256", "parallel.zero=1"}).dp_bytes == Approx(2 * 15.0 / 16 * P));
}

TEST_CASE("plan - the parameters' all-gather after the step is charged once per step") {
  // Accumulation 1, 4 and 16: ZeRO-2's per-micro-batch reduce-scatters hide behind the backward;
  // what stays exposed is the one all-gather, whatever the accumulation.
  std::vector<double> exposed;
  for (const char* gb : {"train.global_batch=256", "train.global_batch=1024", "train.global_batch=4096"})
    exposed.push_back(plan_124m({gb, "parallel.zero=2"}).dp_comm_exposed_s);
  CHECK(exposed[0] > 0);
  CHECK(exposed[1] == Approx(exposed[0]));
  CHECK(exposed[2] == Approx(exposed[0]));
  // ZeRO-1 gathers the same parameters after the step: exposed too, not hidden like zero 0's
  // all-reduce behind the last backward.
  const loom::Prediction z0 = plan_124m({"train.global_batch=256"}), z1 = plan_124m({"train.global_batch=256", "parallel.zero=1"});
  CHECK(z1.dp_comm_exposed_s > z0.dp_comm_exposed_s);
  CHECK(z1.step_s > z0.step_s);
}
