// Hang detection over the flight recorder: a thread looks at the calls into plugins that have not
// returned, and the first time one has run longer than a threshold it writes a dump (why "hang")
// and tells its owner, who prints which call it is. The calls one look finds share one dump, which
// holds them as they were seen ("hung_calls"), even if they return before the write. It only
// reports; deciding that a run is lost stays with the timeouts that already bound each kind of call.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <mutex>
#include <set>
#include <string>
#include <thread>

#include "core/observe/flight_recorder.hpp"

namespace mlpt::observe {

class HangWatch {
 public:
  // `dump` may be empty when no dump folder is set.
  using Report =
      std::function<void(const CallRecord& call, double running_s, const std::filesystem::path& dump)>;

  // Looks every `poll_s` seconds (default: a quarter of the threshold, at most 10 s).
  HangWatch(double after_s, Report report, double poll_s = 0);
  ~HangWatch();  // stops the thread
  HangWatch(const HangWatch&) = delete;
  HangWatch& operator=(const HangWatch&) = delete;

  // One look, now: reports the calls past the threshold not reported before, all in one dump;
  // returns how many.
  int check();
  // The same look as of `now_ns` (the recorder's clock, FlightRecorder::now_ns()): a test steps time.
  int check(int64_t now_ns);

  // What a person is told of a hung call: "[mlpt] <where>: engine 'x' call fetch (request 3,
  // thread 123) has not returned after 1801 s; ... are in <dump>".
  static std::string message(const std::string& where, const CallRecord& call, double running_s,
                             const std::filesystem::path& dump);

 private:
  const int64_t after_ns_;
  const Report report_;
  std::mutex check_mutex_;       // check() may be called while the thread checks
  std::set<uint64_t> reported_;  // seqs of calls reported and still running
  std::mutex mutex_;             // stop_
  std::condition_variable wake_;
  bool stop_ = false;
  std::thread thread_;
};

}  // namespace mlpt::observe
