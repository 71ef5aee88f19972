// `loom bench comm`: collective bandwidth across the job, nccl-tests style (parallel/comm_bench.hpp).
#include <cstdio>

#include "engine/cli/commands.hpp"
#include "kernels/backend_factory.hpp"
#include "parallel/comm_bench.hpp"
#include "parallel/mpi_communicator.hpp"
#include "parallel/mpi_world.hpp"
#include "parallel/nccl_communicator.hpp"
#include "parallel/process_groups.hpp"

namespace loom::cli {

int cmd_bench_comm(const CommBenchArgs& a, int* argc, char*** argv) {
  parallel::MpiWorld world(argc, argv);
  try {
    parallel::CommBenchOptions o;
    o.min_bytes = a.min_bytes;
    o.max_bytes = a.max_bytes;
    o.iters = a.iters;
    o.ops = a.ops;
    long wrong = 0;
    if (a.backend == "mpi") {
      parallel::MpiCommunicator comm(world.comm());
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
