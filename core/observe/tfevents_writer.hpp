// TensorBoard event files, written as a run goes so `tensorboard --logdir RUN/tensorboard` (and
// `wandb sync --sync-tensorboard`) show it live. The file is a sequence of records (length,
// masked CRC-32C of the length, data, masked CRC-32C of the data), each holding one serialized
// `Event` protobuf: the first says the file version, every later one a step's scalar summaries.
// The protobuf is encoded here by hand (a few fields); nothing links a protobuf library.
#pragma once

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace mlpt::observe {

class TfEventsWriter {
 public:
  // Creates `folder` and a new events file in it, named as TensorBoard looks for them
  // (events.out.tfevents.<unix seconds>.<host>.<pid>), starting with the file-version event.
  explicit TfEventsWriter(const std::filesystem::path& folder);

  // One event at `step` holding every (tag, value) as a scalar, flushed to the file at once.
  // Non-finite values are written as they are (TensorBoard shows NaN and infinities). Thread-safe.
  void scalars(int64_t step, const std::vector<std::pair<std::string, double>>& values);
  const std::filesystem::path& file() const { return file_; }

 private:
  void write_record(std::string_view data);

  std::filesystem::path file_;
  std::mutex mutex_;
  std::ofstream out_;
};

// The serialized Event protobufs (exposed for the tests): the file-version event and a scalar one.
std::string file_version_event(double wall_time);
std::string scalars_event(double wall_time, int64_t step,
                          const std::vector<std::pair<std::string, double>>& values);

}  // namespace mlpt::observe
