// `kill -USR1 PID` asks a process for a live flight-recorder dump. The handler only writes a byte
// to a pipe (the one async-signal-safe way to wake a thread); a thread of this class dumps and
// says where. One per process at a time; the previous handler comes back when it goes.
#pragma once

#include <signal.h>

#include <filesystem>
#include <functional>
#include <thread>

namespace mlpt::observe {

class DumpOnSignal {
 public:
  // `dumped` is told the dump's path (empty when none could be written), on the watcher thread.
  explicit DumpOnSignal(std::function<void(const std::filesystem::path&)> dumped);
  ~DumpOnSignal();
  DumpOnSignal(const DumpOnSignal&) = delete;
  DumpOnSignal& operator=(const DumpOnSignal&) = delete;

 private:
  std::function<void(const std::filesystem::path&)> dumped_;
  int pipe_[2] = {-1, -1};
  struct sigaction previous_ {};
  std::thread watcher_;
};

}  // namespace mlpt::observe
