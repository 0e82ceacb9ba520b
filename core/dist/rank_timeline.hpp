// A rank's own part of the run's timeline: its calls into its plugins (train steps, publishes,
// fetches, pauses, loads: observe::CallTimeline) as spans of a group of its own, written as they
// return into a trace file of the rank's (trace_parts/<run>/rank-N.json in the run folder), capped
// at [run] trace_max_mb like the coordinator's. The coordinator merges every part into trace.json
// when the run has ended (observe/trace_merge.hpp). The part opens with the rank's first such call
// once the run folder exists: a run that never started leaves no folder behind.
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <mutex>
#include <string>

#include "core/observe/call_timeline.hpp"
#include "core/observe/flight_recorder.hpp"
#include "core/observe/trace_writer.hpp"

namespace mlpt::dist {

// Where the ranks of a run write their parts: a folder of the run folder named for this attempt.
std::filesystem::path trace_parts_dir(const std::filesystem::path& run_dir, const std::string& attempt);
std::filesystem::path trace_part_file(const std::filesystem::path& parts_dir, int rank);
// Rank N's group on the timeline (the coordinator's are 1, its loop, and 2, the rollout slots).
int rank_trace_group(int rank);

// The coordinator, once the run has ended and the ranks were told to stop: waits up to `wait_s`
// for every part in `parts_dir` to be closed, appends them to the run's trace.json (nothing when
// the run has none) and removes the parts. Says on stderr what it could not merge.
void merge_rank_timelines(const std::filesystem::path& run_dir, const std::filesystem::path& parts_dir,
                          double wait_s);

class RankTimeline final : observe::CallListener {
 public:
  // Listens to the process's flight recorder from now on. `who` names the rank's group.
  RankTimeline(int rank, std::string who, std::filesystem::path run_dir, std::filesystem::path parts_dir,
               uint64_t max_bytes);
  ~RankTimeline() override;  // stops listening; the part is closed
  RankTimeline(const RankTimeline&) = delete;
  RankTimeline& operator=(const RankTimeline&) = delete;

 private:
  void call_returned(const observe::CallRecord& call) override;

  const int rank_;
  const std::string who_;
  const std::filesystem::path run_dir_, part_;
  const uint64_t max_bytes_;
  std::mutex mutex_;
  bool gave_up_ = false;
  std::unique_ptr<observe::TraceWriter> trace_;
  std::unique_ptr<observe::CallTimeline> calls_;
};

}  // namespace mlpt::dist
