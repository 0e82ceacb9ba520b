// A timeline of the run in the Chrome trace event format (JSON array form), which Perfetto's UI
// (ui.perfetto.dev) and chrome://tracing open: named tracks (a "process" per group, a "thread" per
// track in it) holding complete spans. Events are appended as they happen and flushed, so a trace
// is readable while the run goes and after a crash (the format allows the closing bracket to be
// missing). The file is capped: past `max_bytes` later events are dropped, and the trace says so in
// its first event and in a marker where the dropping began.
#pragma once

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

namespace mlpt::observe {

class TraceWriter {
 public:
  using Clock = std::chrono::steady_clock;
  // Starts `file` (which must not exist) with a note of the cap; times are measured from now.
  TraceWriter(const std::filesystem::path& file, const std::string& title, uint64_t max_bytes);
  ~TraceWriter();  // close()
  TraceWriter(const TraceWriter&) = delete;
  TraceWriter& operator=(const TraceWriter&) = delete;

  // Names a group of tracks and a track in it (shown sorted by `sort_index`).
  void name_group(int group, const std::string& name, int sort_index);
  void name_track(int group, int track, const std::string& name, int sort_index);
  // A complete span on a track: `start` and `duration` in seconds of this trace's clock.
  void span(int group, int track, std::string_view name, std::string_view category, double start,
            double duration, const nlohmann::json& args = nullptr);
  // A counter track of the group (e.g. rollouts in flight) at time `at`.
  void counter(int group, std::string_view name, double at, const nlohmann::json& values);
  // Every call is thread-safe. Clock: seconds since the trace began.
  double seconds(Clock::time_point t) const { return std::chrono::duration<double>(t - origin_).count(); }
  double now() const { return seconds(Clock::now()); }
  Clock::time_point origin() const { return origin_; }
  // The wall clock (Unix time, ns) at the trace's time 0, also in the file's first event
  // ("clock_origin_unix_ns"): what lines up the timelines of processes on other nodes.
  int64_t origin_unix_ns() const { return origin_unix_ns_; }

  // Ends the JSON array with a last event saying how many events were written and dropped.
  void close();
  uint64_t dropped() const;
  const std::filesystem::path& file() const { return file_; }

 private:
  void write(nlohmann::json event);

  std::filesystem::path file_;
  const uint64_t max_bytes_;
  const Clock::time_point origin_;
  const int64_t origin_unix_ns_;
  mutable std::mutex mutex_;
  std::ofstream out_;
  uint64_t bytes_ = 0, written_ = 0, dropped_ = 0;
  bool first_ = true, closed_ = false;
};

}  // namespace mlpt::observe
