#pragma once
// Appending a record to a log file all or nothing (metrics.jsonl's lines, TensorBoard's records):
// a torn record makes readers stop there or choke on it, and a full disk is exactly when a write
// stops part-way.
#include <sys/types.h>

#include <string>

namespace loom {

// Writes `data` at the end of the file open at `fd`, whose complete records end at byte `size`,
// retrying interrupted writes; `size` grows by data.size(). A write that fails (ENOSPC, EFBIG, EIO)
// cuts the file, and the file offset, back to `size` and throws std::runtime_error
// "<path>: write failed: <reason> (log.dir; the file ends with the last complete <unit>)".
void append_whole(int fd, off_t& size, const std::string& data, const std::string& path, const char* unit);

}  // namespace loom
