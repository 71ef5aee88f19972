#include "parallel/h5_mpio.hpp"

#include <mpi.h>

#include "parallel/mpi_communicator.hpp"

namespace loom::parallel {
namespace {

hid_t mpio(MPI_Comm comm) {
  hid_t fapl = H5Pcreate(H5P_FILE_ACCESS);
  H5Pset_fapl_mpio(fapl, comm, MPI_INFO_NULL);
  return fapl;
}

}  // namespace

hid_t h5_mpio_file_access(MpiCommunicator& comm) { return mpio(comm.comm()); }
hid_t h5_mpio_file_access_alone() { return mpio(MPI_COMM_SELF); }

}  // namespace loom::parallel
