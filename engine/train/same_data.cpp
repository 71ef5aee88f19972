#include "engine/train/same_data.hpp"

#include <cstdio>

#include "parallel/host_collectives.hpp"

namespace loom {
namespace {

// "N tokens of CRC-32C xxxxxxxx".
std::string describe_data(const DataFingerprint& d) {
  char crc[16];
  std::snprintf(crc, sizeof crc, "%08x", d.crc32c);
  return std::to_string(d.tokens) + " tokens of CRC-32C " + crc;
}

}  // namespace

std::string data_differs_from_rank0(parallel::MpiCommunicator& group, const std::string& what,
                                    const DataFingerprint& mine, const std::string& kind) {
  const std::string here = describe_data(mine), rank0 = parallel::broadcast_string(group, here);
  if (here == rank0) return "";
  return what + ": this rank reads " + here + ", rank 0 reads " + rank0 + ": every rank must see the same " + kind +
         " (a node-local copy that differs?)";
}

}  // namespace loom
