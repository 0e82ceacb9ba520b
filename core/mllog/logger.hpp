// The MLPerf result-log writer. Each event is one line
//   :::MLLOG {"namespace": "", "time_ms": 1700000000000, "event_type": "POINT_IN_TIME",
//             "key": "seed", "value": 1234, "metadata": {"file": "loop.cpp", "lineno": 42}}
// (docs/benchmark.md §6), with the reference's field order and its ", " / ": " separators.
//
// Lines go to a file and/or a callback. The file is flushed after every line, so a run that is
// killed leaves a log whose every line is complete. All calls are thread-safe: lines from several
// threads never interleave, and time_ms is taken under the same lock, so it never goes backwards
// between consecutive lines.
#pragma once

#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <functional>
#include <mutex>
#include <source_location>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

namespace mlpt::mllog {

enum class EventType { point_in_time, interval_start, interval_end };
std::string_view to_string(EventType type);  // "POINT_IN_TIME", ...

// Milliseconds since the Unix epoch (the reference's time_ms).
int64_t now_ms();

// One complete ":::MLLOG {...}" line, without the newline. `metadata` must be an object (or null);
// its "file" and "lineno" come first, then its other entries.
std::string format_line(int64_t time_ms, EventType type, std::string_view key,
                        const nlohmann::json& value, const nlohmann::json& metadata);

class Logger {
 public:
  using Sink = std::function<void(const std::string& line)>;  // gets each line, no newline
  using Clock = std::function<int64_t()>;                     // ms since epoch

  struct Options {
    std::filesystem::path file;  // empty: no file
    bool append = false;         // false truncates an existing file
    Sink sink;                   // optional, called under the logger's lock
    Clock clock;                 // optional; default now_ms (tests inject a simulated clock)
  };

  // Throws mlpt::Error naming the file when it cannot be opened.
  explicit Logger(Options options);
  ~Logger();
  Logger(const Logger&) = delete;
  Logger& operator=(const Logger&) = delete;

  // POINT_IN_TIME key=value.
  void point(std::string_view key, const nlohmann::json& value,
             const nlohmann::json& metadata = nlohmann::json::object(),
             std::source_location where = std::source_location::current());
  // INTERVAL_START / INTERVAL_END (value null, as the reference writes them).
  void start(std::string_view key, const nlohmann::json& metadata = nlohmann::json::object(),
             std::source_location where = std::source_location::current());
  void end(std::string_view key, const nlohmann::json& metadata = nlohmann::json::object(),
           std::source_location where = std::source_location::current());

  // Any event; `metadata` gets "file"/"lineno" from `where` unless it has them already.
  void event(EventType type, std::string_view key, const nlohmann::json& value,
             const nlohmann::json& metadata, std::source_location where);

  int64_t lines_written() const;
  // The result log's file descriptor (-1 without a file), for a crash handler that must close the
  // log with async-signal-safe write(2) calls; every line is flushed, so nothing is buffered.
  int fd() const;

 private:
  Options options_;
  std::FILE* file_ = nullptr;
  mutable std::mutex mutex_;
  int64_t lines_ = 0;
};

}  // namespace mlpt::mllog
