#include "core/observe/call_timeline.hpp"

#include <string_view>

namespace mlpt::observe {

bool timeline_call(const CallRecord& call) {
  const std::string_view kind = call.kind;
  return call.request_id == 0 && (kind == "trainer" || kind == "engine" || kind == "transport");
}

CallTimeline::CallTimeline(TraceWriter& trace, int group, int first_track)
    : trace_(trace),
      group_(group),
      first_track_(first_track),
      recorder_offset_s_(static_cast<double>(FlightRecorder::instance().now_ns()) * 1e-9 - trace.now()) {}

void CallTimeline::call_returned(const CallRecord& call) {
  if (!timeline_call(call)) return;
  int track;
  {
    std::lock_guard lock(mutex_);
    const std::string component = std::string(call.kind) + " " + call.component;
    auto [it, fresh] = tracks_.try_emplace(component, first_track_ + static_cast<int>(tracks_.size()));
    track = it->second;
    if (fresh) trace_.name_track(group_, track, component, track);
  }
  nlohmann::json args = nullptr;
  if (call.status == CallRecord::kFailed) args = {{"status", "failed"}};
  trace_.span(group_, track, call.call, "abi", static_cast<double>(call.start_ns) * 1e-9 - recorder_offset_s_,
              static_cast<double>(call.duration_ns) * 1e-9, args);
}

}  // namespace mlpt::observe
