#pragma once
// An error that every rank raises at the same point of the run, after a vote (too many
// non-finite steps, rank 0 unable to write the run directory), with no I/O left half done. The
// job can then end in order: rank 0 prints and records it, every rank returns status 1. Any
// other error ends the job with an MPI abort, which can kill rank 0 before it has printed
// anything. (A failed checkpoint save is agreed on too, but ends with an abort: after a failed
// parallel HDF5 write, HDF5's own clean-up inside MPI's finalize crashed.)
#include <stdexcept>

namespace loom {

struct JobError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

}  // namespace loom
