#pragma once
// Parallel HDF5's MPI-IO file driver over a group of ranks: the file-access property list with
// which every member of the group opens (or creates) one HDF5 file together. Also the same over
// this process alone, for a process that reads a file without the others (no collective call).
//
// The property lists are new HDF5 objects (hid_t): the caller adds its own settings and closes
// them with H5Pclose once the file is open.
#include <hdf5.h>

namespace loom::parallel {

class MpiCommunicator;

// Collective use: a file opened with it is opened by every member of `comm`.
hid_t h5_mpio_file_access(MpiCommunicator& comm);
// This process alone (MPI-IO over the process itself).
hid_t h5_mpio_file_access_alone();

}  // namespace loom::parallel
