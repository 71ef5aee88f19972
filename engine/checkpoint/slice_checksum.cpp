#include "engine/checkpoint/slice_checksum.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <map>
#include <memory>
#include <numeric>
#include <stdexcept>

#include "engine/util/crc32c.hpp"
#include "parallel/host_collectives.hpp"

namespace loom {

void SliceChecksums::add(uint32_t dataset, const std::vector<int64_t>& shape, const TensorSlice& slice,
                         const float* data) {
  const uint64_t gcols = shape.size() > 1 ? uint64_t(shape[1]) : 1, cols = uint64_t(slice.cols);
  const uint64_t row_bytes = gcols * sizeof(float), piece_bytes = cols * sizeof(float);
  const auto* local = reinterpret_cast<const unsigned char*>(data);
  for (const auto& [first, count] : slice.row_runs) {
    const int64_t stored = std::min(count, std::max<int64_t>(0, shape[0] - first));
    if (stored > 0) {
      if (cols == gcols) {  // whole rows: the run is one contiguous piece
        runs_.push_back({dataset, 1, uint64_t(first) * row_bytes, 0, uint64_t(stored) * row_bytes});
        crcs_.push_back(crc32c(local, uint64_t(stored) * row_bytes));
      } else {  // a column block: one piece per row
        runs_.push_back({dataset, uint64_t(stored), uint64_t(first) * row_bytes + uint64_t(slice.col_begin) * 4,
                         row_bytes, piece_bytes});
        for (int64_t r = 0; r < stored; ++r) crcs_.push_back(crc32c(local + uint64_t(r) * piece_bytes, piece_bytes));
      }
    }
    local += uint64_t(count) * piece_bytes;  // padding rows are in the local buffer all the same
  }
}

std::vector<uint32_t> SliceChecksums::combine_on_rank0(const std::vector<uint64_t>& dataset_bytes,
                                                       parallel::MpiCommunicator& group) const {
  // Gather everyone's runs and CRCs (a few MB at most: 4 bytes per row of a column-split tensor).
  const std::vector<char> run_bytes = parallel::gather_bytes(group, runs_.data(), runs_.size() * sizeof(Run));
  const std::vector<char> crc_bytes = parallel::gather_bytes(group, crcs_.data(), crcs_.size() * sizeof(uint32_t));
  if (group.rank() != 0) return {};

  struct Piece {
    uint64_t offset, len;
    uint32_t crc;
  };
  std::vector<std::vector<Piece>> pieces(dataset_bytes.size());
  const Run* runs = reinterpret_cast<const Run*>(run_bytes.data());
  const uint32_t* crcs = reinterpret_cast<const uint32_t*>(crc_bytes.data());
  size_t k = 0;
  for (size_t i = 0; i < run_bytes.size() / sizeof(Run); ++i) {
    const Run& run = runs[i];
    if (run.dataset >= pieces.size()) throw std::runtime_error("checkpoint checksums: a rank named dataset " +
                                                               std::to_string(run.dataset) + " of " +
                                                               std::to_string(pieces.size()));
    for (uint64_t j = 0; j < run.count; ++j) pieces[run.dataset].push_back({run.offset + j * run.stride, run.len, crcs[k++]});
  }
  std::map<uint64_t, std::unique_ptr<Crc32cAppender>> appenders;  // one per distinct piece length
  std::vector<uint32_t> out(dataset_bytes.size(), 0);
  for (size_t d = 0; d < pieces.size(); ++d) {
    auto& ps = pieces[d];
    std::sort(ps.begin(), ps.end(), [](const Piece& a, const Piece& b) { return a.offset < b.offset; });
    uint64_t at = 0;
    uint32_t crc = 0;
    for (const Piece& p : ps) {
      if (p.offset != at)
        throw std::runtime_error("checkpoint checksums: dataset " + std::to_string(d) + " has a " +
                                 (p.offset > at ? "gap" : "overlap") + " at byte " + std::to_string(at) +
                                 " among the ranks' slices");
      auto& app = appenders[p.len];
      if (!app) app = std::make_unique<Crc32cAppender>(p.len);
      crc = (*app)(crc, p.crc);
      at += p.len;
    }
    if (at != dataset_bytes[d])
      throw std::runtime_error("checkpoint checksums: the ranks' slices cover " + std::to_string(at) + " of the " +
                               std::to_string(dataset_bytes[d]) + " bytes of dataset " + std::to_string(d));
    out[d] = crc;
  }
  return out;
}

uint32_t file_crc_from_datasets(const std::string& path, uint64_t file_bytes, const std::vector<DatasetExtent>& extents,
                                const std::vector<uint32_t>& crcs) {
  std::vector<size_t> order(extents.size());
  std::iota(order.begin(), order.end(), size_t(0));
  std::sort(order.begin(), order.end(), [&](size_t a, size_t b) { return extents[a].offset < extents[b].offset; });
  const int fd = ::open(path.c_str(), O_RDONLY);
  if (fd < 0) throw std::runtime_error(path + ": cannot open: " + std::strerror(errno));
  std::vector<unsigned char> buf(size_t(4) << 20);
  uint32_t crc = 0;
  uint64_t at = 0;
  auto read_gap = [&](uint64_t end) {  // CRC of the file's bytes [at, end)
    while (at < end) {
      const ssize_t got = ::pread(fd, buf.data(), std::min<uint64_t>(buf.size(), end - at), off_t(at));
      if (got <= 0) {
        ::close(fd);
        throw std::runtime_error(path + ": short read at byte " + std::to_string(at) + " (truncated?)");
      }
      crc = crc32c(buf.data(), size_t(got), crc);
      at += uint64_t(got);
    }
  };
  for (size_t i : order) {
    const DatasetExtent& e = extents[i];
    if (e.offset < at || e.offset + e.bytes > file_bytes) {
      ::close(fd);
      throw std::runtime_error(path + ": dataset " + e.name + " at bytes [" + std::to_string(e.offset) + ", " +
                               std::to_string(e.offset + e.bytes) + ") overlaps another or runs past the end");
    }
    read_gap(e.offset);
    crc = crc32c_combine(crc, crcs[i], e.bytes);
    at += e.bytes;
  }
  read_gap(file_bytes);
  ::close(fd);
  return crc;
}

}  // namespace loom
