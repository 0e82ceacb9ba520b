// A process's calls into its plugins as spans on the run's timeline: each call that makes a phase
// of the rank (a train step, an export, a publish or fetch of the weights, pause, resume, a load)
// goes on a track of its component in one group of the trace. The calls that serve one request
// (an engine request, a sandbox command, a harness or reward step) are left out: the rollout
// slots show them as the rollouts' turns. The coordinator's timeline and every other rank's part
// of it (dist/rank_timeline) use this.
#pragma once

#include <map>
#include <mutex>
#include <string>

#include "core/observe/flight_recorder.hpp"
#include "core/observe/trace_writer.hpp"

namespace mlpt::observe {

// Whether `call` is one of a rank's phases (see above).
bool timeline_call(const CallRecord& call);

// The first component track of a group: below it the coordinator keeps its own (the loop's), and a
// rank's part uses the same numbers so the merged groups read alike.
inline constexpr int kFirstComponentTrack = 10;

class CallTimeline final : public CallListener {
 public:
  // Spans go to `group` of `trace` (which must outlive this), a track per component numbered from
  // `first_track`; the flight recorder's clock is mapped onto the trace's.
  CallTimeline(TraceWriter& trace, int group, int first_track = kFirstComponentTrack);
  void call_returned(const CallRecord& call) override;

 private:
  TraceWriter& trace_;
  const int group_, first_track_;
  const double recorder_offset_s_;  // the flight recorder's clock minus the trace's
  std::mutex mutex_;
  std::map<std::string, int> tracks_;  // by "kind component"
};

}  // namespace mlpt::observe
