#include "parallel/host_collectives.hpp"

#include "parallel/mpi_check.hpp"

#include <climits>
#include <stdexcept>

namespace loom::parallel {
namespace {

void check(int rc, const char* what) { mpi_check(rc, what); }
int as_int(size_t n) { return mpi_count(n, "bytes"); }

// Rank order displacements of `counts`; returns their sum.
size_t displacements(const std::vector<int>& counts, std::vector<int>& displs) {
  displs.assign(counts.size(), 0);
  size_t total = 0;
  for (size_t i = 0; i < counts.size(); ++i) {
    displs[i] = as_int(total);
    total += size_t(counts[i]);
  }
  as_int(total);
  return total;
}

}  // namespace

std::string broadcast_string(MpiCommunicator& comm, const std::string& s, int root) {
  int len = comm.rank() == root ? as_int(s.size()) : 0;
  check(MPI_Bcast(&len, 1, MPI_INT, root, comm.comm()), "MPI_Bcast");
  std::string out(size_t(len), '\0');
  if (len) {
    if (comm.rank() == root) out = s;
    check(MPI_Bcast(out.data(), len, MPI_CHAR, root, comm.comm()), "MPI_Bcast");
  }
  return out;
}

std::vector<std::string> broadcast_strings(MpiCommunicator& comm, const std::vector<std::string>& list, int root) {
  const int64_t n = broadcast_int(comm, comm.rank() == root ? int64_t(list.size()) : 0, root);
  std::vector<std::string> out;
  out.reserve(size_t(n));
  for (int64_t i = 0; i < n; ++i)
    out.push_back(broadcast_string(comm, comm.rank() == root ? list[size_t(i)] : "", root));
  return out;
}

int64_t broadcast_int(MpiCommunicator& comm, int64_t v, int root) {
  long long x = v;
  check(MPI_Bcast(&x, 1, MPI_LONG_LONG, root, comm.comm()), "MPI_Bcast");
  return int64_t(x);
}

void barrier_unwatched(MpiCommunicator& comm) { check(MPI_Barrier(comm.comm()), "MPI_Barrier"); }

int all_reduce_min(MpiCommunicator& comm, int v) {
  check(MPI_Allreduce(MPI_IN_PLACE, &v, 1, MPI_INT, MPI_MIN, comm.comm()), "MPI_Allreduce");
  return v;
}

std::vector<std::string> all_gather_strings(MpiCommunicator& comm, const std::string& s) {
  return all_gather_strings(comm.comm(), s);
}

std::vector<std::string> all_gather_strings(MPI_Comm comm, const std::string& s) {
  int len = as_int(s.size()), size = 0;
  check(MPI_Comm_size(comm, &size), "MPI_Comm_size");
  std::vector<int> counts(size_t(size), 0), displs;
  check(MPI_Allgather(&len, 1, MPI_INT, counts.data(), 1, MPI_INT, comm), "MPI_Allgather");
  std::vector<char> all(displacements(counts, displs) + 1);  // + 1: never empty
  check(MPI_Allgatherv(s.data(), len, MPI_CHAR, all.data(), counts.data(), displs.data(), MPI_CHAR, comm),
        "MPI_Allgatherv");
  std::vector<std::string> out;
  for (size_t i = 0; i < counts.size(); ++i) out.emplace_back(all.data() + displs[i], size_t(counts[i]));
  return out;
}

std::vector<char> gather_bytes(MpiCommunicator& comm, const void* data, size_t n, int root,
                               std::vector<size_t>* counts) {
  int bytes = as_int(n);
  const bool at_root = comm.rank() == root;
  std::vector<int> sizes(at_root ? size_t(comm.size()) : 0, 0), displs;
  check(MPI_Gather(&bytes, 1, MPI_INT, sizes.data(), 1, MPI_INT, root, comm.comm()), "MPI_Gather");
  std::vector<char> all(at_root ? displacements(sizes, displs) : 0);
  check(MPI_Gatherv(data, bytes, MPI_BYTE, all.data(), sizes.data(), displs.data(), MPI_BYTE, root, comm.comm()),
        "MPI_Gatherv");
  if (counts) counts->assign(sizes.begin(), sizes.end());
  return all;
}

std::string mpi_library_version() {
  char buf[MPI_MAX_LIBRARY_VERSION_STRING] = {};
  int len = 0;
  MPI_Get_library_version(buf, &len);
  std::string v(buf, size_t(len));
  if (auto nl = v.find_first_of("\r\n"); nl != std::string::npos) v.resize(nl);
  return v;
}

}  // namespace loom::parallel
