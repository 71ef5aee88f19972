// `loom bench comm`: collective bandwidth across the job, nccl-tests style (parallel/comm_bench.hpp).
#include <cstdio>
#include <stdexcept>
#include <string>
#include <vector>

#include "engine/cli/commands.hpp"
#include "kernels/backend_factory.hpp"
#include "parallel/comm_bench.hpp"
#include "parallel/launcher_env.hpp"
#include "parallel/mpi_communicator.hpp"
#include "parallel/mpi_world.hpp"
#include "parallel/nccl_communicator.hpp"
#include "parallel/process_groups.hpp"

namespace loom::cli {
namespace {
DType parse_bench_dtype(const std::string& s) {
  if (s == "fp32") return DType::f32;
  if (s == "bf16") return DType::bf16;
  if (s == "fp16") return DType::f16;
  throw std::invalid_argument("bench comm: --dtype " + s + " (fp32, bf16 or fp16)");
}

// "--algo a,b": each name checked; empty: every algorithm, Auto first.
std::vector<std::string> parse_algos(const std::string& list) {
  std::vector<std::string> out;
  const std::string s = (list.empty() ? "auto,mpi,ring,hierarchical" : list) + ",";
  for (size_t pos = 0, next; (next = s.find(',', pos)) != std::string::npos; pos = next + 1) {
    const std::string a = s.substr(pos, next - pos);
    if (a.empty()) continue;
    parallel::parse_all_reduce_algo(a);  // throws on an unknown name
    out.push_back(a);
  }
  return out;
}
}  // namespace

int cmd_bench_comm(const CommBenchArgs& a, int* argc, char*** argv) {
  if (a.min_bytes > a.max_bytes) {  // a usage error, as the option parser's: every rank exits 2, one says why
    if (parallel::launcher_rank() == 0)
      std::fprintf(stderr, "loom bench comm: error: --min-bytes %zu is above --max-bytes %zu\n", a.min_bytes,
                   a.max_bytes);
    return 2;
  }
  parallel::MpiWorld world(argc, argv);
  try {
    parallel::CommBenchOptions o;
    o.min_bytes = a.min_bytes;
    o.max_bytes = a.max_bytes;
    o.iters = a.iters;
    o.ops = a.ops;
    o.dtype = parse_bench_dtype(a.dtype);
    o.link_gbps = a.link_gbps;
    long wrong = 0;
    if (a.backend == "mpi") {
      parallel::MpiCommunicator comm(world.comm());
      if (!a.half_reduce.empty()) comm.set_half_reduce(parallel::parse_half_reduce(a.half_reduce));
      if (o.dtype != DType::f32)
        o.note = std::string("reduced via ") + parallel::half_reduce_name(comm.half_reduce());
      comm.set_ranks_per_node(a.ranks_per_node);
      parallel::RingOptions ring = comm.ring_options();
      if (a.segment_kib) ring.segment_bytes = a.segment_kib << 10;
      if (a.in_flight) ring.in_flight = a.in_flight;
      comm.set_ring_options(ring);
      o.algos = parse_algos(a.algo);
      o.select_algo = [&comm](const std::string& name) {
        comm.set_all_reduce_algo(parallel::parse_all_reduce_algo(name));
      };
      char extra[160];
      std::snprintf(extra, sizeof extra, "%sring %zu KiB x %d in flight, auto: ring from %zu KiB%s",
                    o.note.empty() ? "" : ", ", ring.segment_bytes >> 10, ring.in_flight,
                    parallel::kRingMinBytes >> 10, a.ranks_per_node ? ", nodes faked" : "");
      o.note += extra;
      wrong = parallel::run_comm_bench(comm, parallel::host_bench_memory(), o);
    } else {
      // One GPU per rank, chosen by the rank on this node, as the trainer chooses it.
      const int device = cuda_device_for_local_rank(parallel::node_rank(world.comm()).rank);
      auto comm = parallel::make_nccl_communicator(world.comm(), device);
      wrong = parallel::run_comm_bench(*comm, parallel::device_bench_memory(device), o);
    }
    return wrong == 0 ? 0 : 1;
  } catch (const std::exception& e) {
    world.abort(e.what(), 1);
  }
}

}  // namespace loom::cli
