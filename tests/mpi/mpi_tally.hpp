#pragma once
// The plain-MPI tests' bookkeeping (test_comm, test_comm_volume, test_allreduce_algos): each rank
// counts its checks and prints the failed ones; tally_exit() sums the counts over the world,
// prints "N passed, M failed" on rank 0 and returns the exit status (non-zero if any rank failed).
#include <mpi.h>

#include <cstdio>
#include <string>

namespace loom::test {

inline int passed = 0, failed = 0;

inline void check(bool ok, const std::string& what, int rank) {
  if (ok) {
    ++passed;
  } else {
    ++failed;
    std::fprintf(stderr, "rank %d: FAILED %s\n", rank, what.c_str());
  }
}

inline int tally_exit() {
  int rank = 0, total_failed = 0, total_passed = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Allreduce(&failed, &total_failed, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
  MPI_Allreduce(&passed, &total_passed, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
  if (rank == 0) std::printf("%d passed, %d failed\n", total_passed, total_failed);
  return total_failed == 0 ? 0 : 1;
}

}  // namespace loom::test
