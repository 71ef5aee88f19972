#pragma once
// Shared by parallel/'s MPI code: a failed MPI call as an exception naming the call, and a count
// checked against MPI's int arguments.
#include <mpi.h>

#include <climits>
#include <cstddef>
#include <stdexcept>
#include <string>

namespace loom::parallel {

inline void mpi_check(int rc, const char* what) {
  if (rc == MPI_SUCCESS) return;
  char msg[MPI_MAX_ERROR_STRING];
  int len = 0;
  MPI_Error_string(rc, msg, &len);
  throw std::runtime_error(std::string(what) + " failed: " + std::string(msg, size_t(len)));
}

// `n` as MPI's int count; `unit` names what is counted ("bytes", "elements") in the error.
inline int mpi_count(size_t n, const char* unit) {
  if (n > size_t(INT_MAX))
    throw std::runtime_error("MPI message of " + std::to_string(n) + " " + unit + " exceeds INT_MAX");
  return int(n);
}

}  // namespace loom::parallel
