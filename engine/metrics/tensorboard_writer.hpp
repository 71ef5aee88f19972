#pragma once
// TensorBoard event files written directly (no TensorFlow or protobuf library): what
// `tensorboard --logdir RUN_DIR` reads to plot the run's scalars.
//
// File: records of [uint64 LE length][uint32 LE masked CRC-32C of those 8 bytes][an Event,
// protobuf-encoded][uint32 LE masked CRC-32C of it]; the first Event carries file_version
// "brain.Event:2". Each logged step is one Event holding a Summary of simple_value scalars.
// The few protobuf fields needed are encoded by hand (encode_* below, checked against bytes
// produced by TensorBoard's own writer in the unit tests).
#include <cstdint>
#include <sys/types.h>

#include <string>
#include <utility>
#include <vector>

namespace loom {

namespace tb {
// The serialized Event messages (exposed for the tests).
std::string encode_file_version_event(double wall_time);
std::string encode_scalars_event(double wall_time, int64_t step,
                                 const std::vector<std::pair<std::string, float>>& scalars);
// SessionLog{status: START} at `step`: TensorBoard drops the points of earlier runs at or after
// it, so a run resumed from a checkpoint shows no stale tail.
std::string encode_session_start_event(double wall_time, int64_t step);
// One framed record: length, masked CRC of the length, data, masked CRC of the data.
std::string frame_record(const std::string& event);
uint32_t masked_crc32c(const void* data, size_t n);
}  // namespace tb

class TensorBoardWriter {
 public:
  // Creates a new events.out.tfevents.<unix seconds>.<host>.<pid>.<n> in `dir` (created if needed;
  // n is 0 unless this process made one in the same second: never an existing file)
  // and writes the file_version record. A resumed session (`resume_step` > 0: the steps done
  // when it began), or any session in a directory that holds event files already, also writes a
  // session start at resume_step + 1, the first step this session writes: TensorBoard then drops
  // the earlier sessions' points from there on (trained past the checkpoint and lost, or a
  // fresh start's predecessor) and keeps resume_step's own, which the checkpoint holds.
  TensorBoardWriter(const std::string& dir, int64_t resume_step = 0);
  ~TensorBoardWriter();
  TensorBoardWriter(const TensorBoardWriter&) = delete;
  TensorBoardWriter& operator=(const TensorBoardWriter&) = delete;

  // Non-finite values are skipped (TensorBoard would plot them as gaps or break the axis).
  // Throws std::runtime_error naming the file and the reason when the write fails (a full
  // disk); the file then still ends with its last complete record.
  void scalars(int64_t step, const std::vector<std::pair<std::string, double>>& values);
  const std::string& path() const { return path_; }

 private:
  void write(const std::string& event);
  std::string path_;
  int fd_ = -1;
  off_t size_ = 0;  // bytes of complete records
};

}  // namespace loom
