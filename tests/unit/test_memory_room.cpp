// memory_room(): MemAvailable lowered to what the process's memory cgroup leaves, on made-up
// /proc and /sys trees laid out as Slurm (cgroup v1 and v2), systemd and a container write them.
// The real kernel's enforcement of such a limit is tested end to end by
// tests/mpi/memory_cgroup_elastic.sh.
#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>
#include <string>

#include "engine/train/memory_check.hpp"
#include "engine/util/memory_room.hpp"

namespace fs = std::filesystem;

namespace {

constexpr long long kMiB = 1024 * 1024;

struct Tree {
  fs::path root;
  explicit Tree(const std::string& name) : root(fs::temp_directory_path() / "loom_test_memory_room" / name) {
    fs::remove_all(root);
    fs::create_directories(root);
  }
  void write(const std::string& rel, const std::string& text) const {
    const fs::path p = root / rel;
    fs::create_directories(p.parent_path());
    std::ofstream(p) << text;
  }
  loom::MemoryRoom room() const { return loom::memory_room(root.string()); }
};

std::string meminfo_mb(long long mb) {
  return "MemTotal:       99999999 kB\nMemFree:         1000 kB\nMemAvailable:   " + std::to_string(mb * 1024) +
         " kB\nBuffers:  12 kB\n";
}

const char* kV1Mounts =
    "31 23 0:28 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755\n"
    "32 31 0:29 / /sys/fs/cgroup/cpu,cpuacct rw,relatime shared:9 - cgroup cgroup rw,cpu,cpuacct\n"
    "35 31 0:32 / /sys/fs/cgroup/memory rw,relatime shared:12 - cgroup cgroup rw,memory\n";
const char* kV2Mounts = "30 23 0:26 / /sys/fs/cgroup rw,nosuid,nodev,noexec,relatime shared:4 - cgroup2 cgroup2 "
                        "rw,nsdelegate,memory_recursiveprot\n";

}  // namespace

TEST_CASE("without a memory cgroup the room is the node's MemAvailable", "[memory_room]") {
  Tree t("node_only");
  t.write("proc/meminfo", meminfo_mb(23707));
  t.write("proc/self/mountinfo", kV1Mounts);
  t.write("proc/self/cgroup", "4:memory:/\n3:cpu,cpuacct:/\n");
  // The root cgroup of v1 shows "no limit" as the largest page-aligned int64.
  t.write("sys/fs/cgroup/memory/memory.limit_in_bytes", "9223372036854771712\n");
  t.write("sys/fs/cgroup/memory/memory.usage_in_bytes", std::to_string(5000 * kMiB));
  const loom::MemoryRoom r = t.room();
  REQUIRE(r.known());
  CHECK(r.mb == Approx(23707));
  CHECK(r.where == "the node has 23707 MB available");
}

TEST_CASE("nothing readable gives an unknown room", "[memory_room]") {
  Tree t("nothing");
  CHECK_FALSE(t.room().known());
}

TEST_CASE("cgroup v1 under Slurm - the job limit binds its step and page cache is not counted", "[memory_room]") {
  Tree t("slurm_v1");
  t.write("proc/meminfo", meminfo_mb(500000));
  t.write("proc/self/mountinfo", kV1Mounts);
  t.write("proc/self/cgroup", "5:cpu,cpuacct:/slurm/uid_0/job_7/step_0\n4:memory:/slurm/uid_0/job_7/step_0/task_0\n");
  const std::string job = "sys/fs/cgroup/memory/slurm/uid_0/job_7";
  t.write(job + "/memory.limit_in_bytes", std::to_string(4096 * kMiB));
  t.write(job + "/memory.usage_in_bytes", std::to_string(1024 * kMiB));
  t.write(job + "/memory.stat", "cache 300\nrss 400\ntotal_cache 314572800\ntotal_inactive_file " +
                                    std::to_string(200 * kMiB) + "\n");
  t.write(job + "/step_0/memory.limit_in_bytes", "9223372036854771712");
  t.write(job + "/step_0/memory.usage_in_bytes", std::to_string(1000 * kMiB));
  t.write(job + "/step_0/task_0/memory.limit_in_bytes", "9223372036854771712");
  t.write("sys/fs/cgroup/memory/memory.limit_in_bytes", "9223372036854771712");
  const loom::MemoryRoom r = t.room();
  CHECK(r.mb == Approx(4096 - (1024 - 200)));
  CHECK(r.where == "the memory cgroup /sys/fs/cgroup/memory/slurm/uid_0/job_7 (memory.limit_in_bytes 4096 MB, "
                   "824 MB in use) leaves 3272 MB");
}

TEST_CASE("cgroup v2 - the tightest level wins and max means none", "[memory_room]") {
  Tree t("systemd_v2");
  t.write("proc/meminfo", meminfo_mb(60000));
  t.write("proc/self/mountinfo", kV2Mounts);
  t.write("proc/self/cgroup", "0::/system.slice/train.service\n");
  t.write("sys/fs/cgroup/system.slice/memory.max", std::to_string(8192 * kMiB) + "\n");
  t.write("sys/fs/cgroup/system.slice/memory.current", std::to_string(7000 * kMiB) + "\n");
  t.write("sys/fs/cgroup/system.slice/memory.stat", "anon 1\nfile 2\ninactive_file " + std::to_string(500 * kMiB));
  // The service's own limit is larger but it leaves more room than its parent does.
  t.write("sys/fs/cgroup/system.slice/train.service/memory.max", std::to_string(3000 * kMiB));
  t.write("sys/fs/cgroup/system.slice/train.service/memory.current", std::to_string(1000 * kMiB));
  t.write("sys/fs/cgroup/system.slice/train.service/memory.stat", "inactive_file 0\n");
  SECTION("the parent's room is the least") {
    const loom::MemoryRoom r = t.room();
    CHECK(r.mb == Approx(8192 - 6500));
    CHECK(r.where.find("/sys/fs/cgroup/system.slice (memory.max 8192 MB, 6500 MB in use) leaves 1692 MB") !=
          std::string::npos);
  }
  SECTION("max is no limit") {
    t.write("sys/fs/cgroup/system.slice/memory.max", "max\n");
    const loom::MemoryRoom r = t.room();
    CHECK(r.mb == Approx(2000));
    CHECK(r.where.find("system.slice/train.service (memory.max 3000 MB") != std::string::npos);
  }
  SECTION("a node with less available than the cgroups leave bounds it") {
    t.write("proc/meminfo", meminfo_mb(1500));
    CHECK(t.room().where == "the node has 1500 MB available");
  }
  SECTION("usage past the limit leaves no room, and that is known") {
    t.write("sys/fs/cgroup/system.slice/train.service/memory.current", std::to_string(3100 * kMiB));
    const loom::MemoryRoom r = t.room();
    REQUIRE(r.known());
    CHECK(r.mb == 0);
  }
}

TEST_CASE("a container's cgroup mounted as the mount's root", "[memory_room]") {
  Tree t("container");
  t.write("proc/meminfo", meminfo_mb(100000));
  // Docker without a cgroup namespace: /proc/self/cgroup names the host's path, the mount's root
  // is that same cgroup.
  t.write("proc/self/mountinfo",
          "35 31 0:32 /docker/abc123 /sys/fs/cgroup/memory ro,nosuid - cgroup cgroup rw,memory\n");
  t.write("proc/self/cgroup", "4:memory:/docker/abc123\n");
  t.write("sys/fs/cgroup/memory/memory.limit_in_bytes", std::to_string(2048 * kMiB));
  t.write("sys/fs/cgroup/memory/memory.usage_in_bytes", std::to_string(48 * kMiB));
  CHECK(t.room().mb == Approx(2000));
  SECTION("mountinfo's octal escapes are decoded (a space in the mount point)") {
    t.write("proc/self/mountinfo",
            "35 31 0:32 /docker/abc123 /sys/fs/cg\\040mem ro,nosuid - cgroup cgroup rw,memory\n");
    t.write("sys/fs/cg mem/memory.limit_in_bytes", std::to_string(1024 * kMiB));
    t.write("sys/fs/cg mem/memory.usage_in_bytes", std::to_string(24 * kMiB));
    CHECK(t.room().mb == Approx(1000));
  }
  SECTION("a cgroup outside the mount's root cannot be read and is left out") {
    t.write("proc/self/cgroup", "4:memory:/other/xyz\n");
    CHECK(t.room().where == "the node has 100000 MB available");
  }
}

TEST_CASE("an allocation that fails anyway is reported with the plan's figures for its device", "[memory_room]") {
  loom::Recipe r;  // the defaults: one rank, ZeRO 0
  r.model.n_layer = 2, r.model.n_head = 2, r.model.d_model = 64, r.model.vocab_size = 256, r.model.seq_len = 32;
  r.train.micro_batch = 2, r.train.global_batch = 2;
  SECTION("the host's bare std::bad_alloc") {
    const std::string m = loom::allocation_failure_message(r, "the model", 3, "", false);
    INFO(m);
    CHECK(m.rfind("rank 3: out of memory allocating the model (loom plan predicts ", 0) == 0);
    CHECK(m.find("runtime 37 MB") != std::string::npos);  // the CPU's process baseline
    CHECK(m.find("shard the optimizer state (parallel.zero=1)") != std::string::npos);
  }
  SECTION("the CUDA backend's, with its own account and the GPU's prediction") {
    r.parallel.zero = 1;
    const std::string cause = "GPU out of memory: cudaMalloc of 1536.0 MB failed at x.cu:1 (CUDA device 0: 812 MB "
                              "free of 81079 MB, every process's allocations counted)";
    const std::string m = loom::allocation_failure_message(r, "the model", 0, cause, true);
    INFO(m);
    CHECK(m.rfind("rank 0: out of memory allocating the model: " + cause + " (loom plan predicts ", 0) == 0);
    CHECK(m.find("runtime 1024 MB") != std::string::npos);  // the CUDA context, cuBLASLt and NCCL
    CHECK(m.find("host staging") == std::string::npos);     // host memory, not the GPU's
    CHECK(m.find("parallel.zero=2 or 3") != std::string::npos);
  }
}
