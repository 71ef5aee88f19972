#include "parallel/mpi_world.hpp"

#include "parallel/bounded_abort.hpp"
#include "parallel/host_collectives.hpp"
#include "parallel/mpi_communicator.hpp"

#include <unistd.h>

#include <climits>
#include <cstdlib>
#include <cstdio>
#include <vector>

namespace loom::parallel {

std::vector<int> world_ranks(MPI_Comm comm) {
  int size = 0;
  MPI_Comm_size(comm, &size);
  std::vector<int> local(size_t(size), 0), world(size_t(size), -1);
  for (int i = 0; i < size; ++i) local[size_t(i)] = i;
  MPI_Group group = MPI_GROUP_NULL, world_group = MPI_GROUP_NULL;
  MPI_Comm_group(comm, &group);
  MPI_Comm_group(MPI_COMM_WORLD, &world_group);
  MPI_Group_translate_ranks(group, size, local.data(), world_group, world.data());
  MPI_Group_free(&group);
  MPI_Group_free(&world_group);
  return world;
}

MpiWorld::MpiWorld(int* argc, char*** argv) {
  int provided = 0;
  MPI_Init_thread(argc, argv, MPI_THREAD_MULTIPLE, &provided);
  // Errors on MPI_COMM_WORLD return codes instead of killing the job silently; our callers turn
  // them into messages that name the rank and then abort.
  MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank_);
  MPI_Comm_size(MPI_COMM_WORLD, &size_);
}

MpiWorld::~MpiWorld() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (!finalized) MPI_Finalize();
}

std::string MpiWorld::hostname() const {
  char buf[256] = {0};
  gethostname(buf, sizeof buf - 1);
  return buf;
}

std::vector<std::string> MpiWorld::all_gather(const std::string& s) const { return all_gather_strings(comm(), s); }

std::string agree_on_error(const std::string& local_error, MpiCommunicator& group) {
  return agree_on_error(local_error, group.comm());
}

std::string agree_on_error(const std::string& local_error, MPI_Comm comm) {
  int rank = 0, size = 1;
  MPI_Comm_rank(comm, &rank);
  MPI_Comm_size(comm, &size);
  int mine = local_error.empty() ? INT_MAX : rank;
  int first = INT_MAX;
  MPI_Allreduce(&mine, &first, 1, MPI_INT, MPI_MIN, comm);
  if (first == INT_MAX) return "";
  // The failing rank sends its message to everyone, so rank 0 can print it once.
  int len = rank == first ? static_cast<int>(local_error.size()) : 0;
  MPI_Bcast(&len, 1, MPI_INT, first, comm);
  std::vector<char> buf(len);
  if (rank == first) buf.assign(local_error.begin(), local_error.end());
  MPI_Bcast(buf.data(), len, MPI_CHAR, first, comm);
  std::string msg(buf.begin(), buf.end());
  // Every rank failing alike (a bad recipe) is the common case; name the rank only if it is not.
  int failing = local_error.empty() ? 0 : 1, n_failing = 0;
  MPI_Allreduce(&failing, &n_failing, 1, MPI_INT, MPI_SUM, comm);
  if (n_failing < size) msg = "rank " + std::to_string(first) + ": " + msg;
  return msg;
}

std::string MpiWorld::agree_on_error(const std::string& local_error) const {
  return parallel::agree_on_error(local_error, MPI_COMM_WORLD);
}

void MpiWorld::abort(const std::string& what, int code) const {
  std::fprintf(stderr, "loom: rank %d (%s): %s\n", rank_, hostname().c_str(), what.c_str());
  std::fflush(stderr);
  abort_job(code);
}

}  // namespace loom::parallel
