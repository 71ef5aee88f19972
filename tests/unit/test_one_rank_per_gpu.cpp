// The one-rank-per-GPU check (engine/train/one_rank_per_gpu.hpp) on the placements a launch
// produces: one GPU per rank (fine), ranks on several nodes with the same device numbers (fine:
// the UUIDs differ), CPU ranks (no UUID: fine), more ranks than GPUs on a node (device = local
// rank modulo the GPUs: ranks 0 and 4 of 8 on 4 GPUs share), and every task given the same GPU.
#include <catch2/catch.hpp>

#include <string>
#include <vector>

#include "engine/train/one_rank_per_gpu.hpp"

using loom::RankGpu;
using loom::shared_gpu_error;

namespace {
std::string uuid(const std::string& host, int gpu) {
  return "GPU-" + host + "-0000-0000-0000-00000000000" + std::to_string(gpu);
}
// `ranks_per_node` ranks on each of `nodes` nodes with `gpus` GPUs each; rank r drives device
// (local rank) % gpus, as cuda_device_for_local_rank picks it.
std::vector<RankGpu> launch(int nodes, int ranks_per_node, int gpus) {
  std::vector<RankGpu> out;
  for (int n = 0; n < nodes; ++n)
    for (int l = 0; l < ranks_per_node; ++l) {
      const std::string host = "node" + std::to_string(n);
      out.push_back({host, l % gpus, uuid(host, l % gpus)});
    }
  return out;
}
}  // namespace

TEST_CASE("one rank per GPU on each node passes", "[one_rank_per_gpu]") {
  CHECK(shared_gpu_error(launch(1, 1, 1)).empty());
  CHECK(shared_gpu_error(launch(1, 4, 4)).empty());
  CHECK(shared_gpu_error(launch(2, 8, 8)).empty());  // the same device numbers on two nodes
  CHECK(shared_gpu_error(launch(2, 2, 8)).empty());  // fewer ranks than GPUs
}

TEST_CASE("ranks without a GPU (the CPU backend) are not checked", "[one_rank_per_gpu]") {
  std::vector<RankGpu> cpu(4, RankGpu{"node0", 0, ""});
  CHECK(shared_gpu_error(cpu).empty());
}

TEST_CASE("8 ranks on a node of 4 GPUs are refused, naming the first pair", "[one_rank_per_gpu]") {
  const std::string e = shared_gpu_error(launch(2, 8, 4));
  INFO(e);
  CHECK(e.find("ranks 0 and 4 both drive GPU " + uuid("node0", 0)) == 0);
  CHECK(e.find("(CUDA device 0 in both, on node0)") != std::string::npos);
  CHECK(e.find("node0 has 8 ranks on 4 GPUs between them") != std::string::npos);
  CHECK(e.find("--ntasks-per-node") != std::string::npos);
}

TEST_CASE("every task given the same GPU is refused", "[one_rank_per_gpu]") {
  // CUDA_VISIBLE_DEVICES=0 for every task of a 4-GPU node: each sees one device, numbered 0.
  std::vector<RankGpu> ranks(4, RankGpu{"gpu17", 0, uuid("gpu17", 0)});
  const std::string e = shared_gpu_error(ranks);
  INFO(e);
  CHECK(e.find("ranks 0 and 1 both drive GPU") == 0);
  CHECK(e.find("gpu17 has 4 ranks on 1 GPU between them") != std::string::npos);
  CHECK(e.find("CUDA_VISIBLE_DEVICES") != std::string::npos);
}

TEST_CASE("a shared GPU on the second node only is found there", "[one_rank_per_gpu]") {
  std::vector<RankGpu> ranks = launch(2, 2, 2);
  ranks[3].uuid = ranks[2].uuid;  // node1's second rank sees node1's first GPU as its device 1
  const std::string e = shared_gpu_error(ranks);
  INFO(e);
  CHECK(e.find("(CUDA devices 0 and 1, on node1)") != std::string::npos);
  CHECK(e.find("ranks 2 and 3 both drive GPU " + uuid("node1", 0)) == 0);
  CHECK(e.find("node1 has 2 ranks on 1 GPU between them") != std::string::npos);
}

TEST_CASE("the gathered line reads back as it was sent", "[one_rank_per_gpu]") {
  for (const RankGpu& g : {RankGpu{"node-7.cluster", 3, "GPU-8c3e2f1a-0b1c-2d3e-4f5a-6b7c8d9e0f1a"},
                           RankGpu{"h", 0, ""}}) {
    const RankGpu back = loom::parse_rank_gpu_line(loom::rank_gpu_line(g));
    CHECK(back.host == g.host);
    CHECK(back.device == g.device);
    CHECK(back.uuid == g.uuid);
  }
  CHECK_THROWS_WITH(loom::parse_rank_gpu_line("3 no tabs"), Catch::Contains("malformed"));
}
