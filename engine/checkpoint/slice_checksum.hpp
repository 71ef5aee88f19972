#pragma once
// Checksums of a shared checkpoint file without a second pass over it. Each dataset is stored
// contiguously (row-major, global shape); a rank holds pieces of it: whole row runs, or, for a
// tensor split by columns, one piece per row. Every rank takes the CRC-32C of its pieces in
// memory, on the bytes it writes or has just read; rank 0 gathers them, orders them by file
// offset, checks that they tile each dataset exactly, and combines them (crc32c_combine) into
// the dataset's CRC-32C, the very value a pass over the file's bytes would give.
#include <cstdint>
#include <string>
#include <vector>

#include "engine/checkpoint/h5_tensor_file.hpp"

namespace loom {
namespace parallel {
class MpiCommunicator;
}

class SliceChecksums {
 public:
  // The pieces of `slice` (local data `data`, local layout) in dataset number `dataset` of
  // global `shape` (float32). Rows past shape[0] (vocabulary padding) are not stored: skipped.
  void add(uint32_t dataset, const std::vector<int64_t>& shape, const TensorSlice& slice, const float* data);

  // Collective over `group`. On rank 0 returns the CRC-32C of each dataset (dataset_bytes[i] bytes
  // each); throws std::runtime_error if the gathered pieces leave a gap or overlap (a rank wrote
  // or read the wrong slice). Other ranks get an empty vector.
  std::vector<uint32_t> combine_on_rank0(const std::vector<uint64_t>& dataset_bytes,
                                         parallel::MpiCommunicator& group) const;

 private:
  // `count` pieces of `len` bytes, the first at byte `offset` of the dataset, `stride` apart.
  struct Run {
    uint64_t dataset, count, offset, stride, len;
  };
  std::vector<Run> runs_;
  std::vector<uint32_t> crcs_;  // one per piece, runs in order
};

// The CRC-32C of the file at `path` (exactly `file_bytes` long) from the CRCs of its datasets
// (`extents` with `crcs` in the same order), reading only the bytes between and around them
// (HDF5 metadata and alignment padding). Throws std::runtime_error naming the file if it cannot
// be read or the extents overlap or run past its end.
uint32_t file_crc_from_datasets(const std::string& path, uint64_t file_bytes, const std::vector<DatasetExtent>& extents,
                                const std::vector<uint32_t>& crcs);

}  // namespace loom
