#pragma once
// One HDF5 file shared by all ranks of a job (parallel HDF5 over MPI-IO), holding tensors in
// their GLOBAL shapes: each rank writes (or reads) the hyperslabs of its own slice. A reader
// under any parallel layout reads exactly the slices it needs, so resharding is just reading.
// Datasets are contiguous and unfiltered (see h5_tensor_file.cpp for why); the checkpoint's
// manifest checksums the whole file. All calls are collective over the file's communicator and
// must be made in the same order on every rank (ranks with nothing to write or read pass a null
// slice). A file opened alone (open_alone) is one process's: no collective calls.
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace loom {
namespace parallel {
class MpiCommunicator;
}

// Where a rank's local buffer sits in a global tensor: runs of global rows (first, count), in
// local order, and columns [col_begin, col_begin + cols). Rows past the stored shape (vocabulary
// padding) are not stored; on read they come back as zeros.
struct TensorSlice {
  std::vector<std::pair<int64_t, int64_t>> row_runs;
  int64_t col_begin = 0, cols = 1;
};

// Where a (contiguous) dataset's bytes lie in the file: for checksumming datasets one by one.
struct DatasetExtent {
  std::string name;
  uint64_t offset = 0, bytes = 0;
};

class H5TensorFile {
 public:
  // Serial, read-only (no MPI-IO): the byte range of each named dataset in a closed file.
  static std::vector<DatasetExtent> extents(const std::string& path, const std::vector<std::string>& names);
  // Collective over `group` (parallel HDF5 over its MPI-IO). Throws std::runtime_error naming
  // the file.
  static H5TensorFile create(const std::string& path, parallel::MpiCommunicator& group);
  static H5TensorFile open(const std::string& path, parallel::MpiCommunicator& group);
  // Read-only, by this process alone (the other ranks need not open it, nor keep step).
  static H5TensorFile open_alone(const std::string& path);
  H5TensorFile(H5TensorFile&& o) noexcept;
  ~H5TensorFile();
  H5TensorFile(const H5TensorFile&) = delete;
  H5TensorFile& operator=(const H5TensorFile&) = delete;

  // Collective. Creates dataset `name` (e.g. "params/h.0.ln1.weight") of `shape` and writes this
  // rank's slice from `data` (null slice: nothing). Returns "" or what failed on this rank, with
  // the system's reason (e.g. "No space left on device"): it does not throw, because the other
  // ranks go on to the next collective call and must not be left waiting in it.
  std::string write(const std::string& name, const std::vector<int64_t>& shape, const TensorSlice* slice,
                    const float* data);
  // Reads this rank's slice into `data` (local layout; unstored rows zero-filled).
  void read(const std::string& name, const TensorSlice* slice, float* data);
  std::vector<int64_t> shape_of(const std::string& name);

  void set_attr(const std::string& key, const std::string& value);  // on the root group
  std::string attr(const std::string& key);
  void close();
  // Collective. Closes (flushing the metadata); returns "" or what failed, as write() does.
  std::string close_checked();

 private:
  H5TensorFile(int64_t file, std::string path) : file_(file), path_(std::move(path)) {}
  static H5TensorFile open_with(const std::string& path, int64_t mpio_fapl);  // takes the hid_t
  int64_t file_ = -1;  // hid_t
  std::string path_;
};

}  // namespace loom
