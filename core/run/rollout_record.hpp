// Every rollout of a run, recorded for a person to read: <output_dir>/rollouts.jsonl.gz, one JSON
// object per line (gzip; appended as a new gzip member per process, which readers see as one
// stream). A record has the task, the kind (train / validation), the weight versions, each turn's
// reply (content, tool calls) and observation, token counts, the reward with its reason, flags and
// details, and the time split. `mlpt rollout show` prints one as a transcript.
#pragma once

#include <cstdint>
#include <filesystem>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/rollout/trajectory.hpp"

namespace mlpt::run {

inline constexpr const char* kRolloutsFile = "rollouts.jsonl.gz";

class RolloutRecorder {
 public:
  // Opens <output_dir>/rollouts.jsonl.gz for appending; throws mlpt::Error naming it on failure.
  explicit RolloutRecorder(const std::filesystem::path& output_dir);
  ~RolloutRecorder();
  RolloutRecorder(const RolloutRecorder&) = delete;
  RolloutRecorder& operator=(const RolloutRecorder&) = delete;

  // Thread-safe. Writes `record` (a rollout_json) with an "id" unique within the run folder first;
  // returns the id.
  int64_t record(const nlohmann::json& record);
  void flush();

 private:
  std::mutex mutex_;
  void* file_ = nullptr;  // gzFile
  std::filesystem::path path_;
  int64_t next_id_ = 0;
};

// The JSON record of one rollout (what record() writes, without the id). `step` is the training
// step the rollout was generated for (validation: the step it evaluated).
nlohmann::json rollout_json(const rollout::Trajectory& t, const nlohmann::json& task, bool validation, int64_t step);

// Every record of a run folder's rollouts file, in order; throws mlpt::Error naming the file.
std::vector<nlohmann::json> read_rollouts(const std::filesystem::path& output_dir);

// A rollout as a readable transcript.
std::string format_transcript(const nlohmann::json& record);

}  // namespace mlpt::run
