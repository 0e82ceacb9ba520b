// What a run leaves when the process dies on a signal (a plugin's SIGSEGV, SIGBUS, SIGILL, SIGFPE
// or SIGABRT): the result log closed with run_stop status aborted, a message on stderr naming the
// signal, the component and the call the crashing thread was in (plugin::CallScope), and where the
// last whole checkpoint is, and the flight recorder's dump of the last calls into every plugin
// (core/observe/flight_recorder.hpp) when the run set its folder. Checkpoints are renamed into
// place only once complete, so the last one is whole whatever the crash interrupted. The handler uses only async-signal-safe calls (write,
// clock_gettime) on text prepared beforehand, then re-raises the signal with its default action,
// so the exit status still says which signal (128 + N) and a core dump is still taken.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>

#include "core/mllog/logger.hpp"

namespace mlpt::run {

class CrashGuard {
 public:
  // Installs the handlers for `log` (which must outlive the guard). One guard at a time.
  CrashGuard(const mllog::Logger& log, const std::filesystem::path& log_path);
  ~CrashGuard();  // restores the previous handlers
  CrashGuard(const CrashGuard&) = delete;
  CrashGuard& operator=(const CrashGuard&) = delete;

  void run_started();
  void samples(int64_t samples_count);
  void checkpoint_saved(const std::filesystem::path& dir, int64_t step);
  void log_closed();  // run_stop is written: nothing left to close
};

}  // namespace mlpt::run
