// The cancels of an engine older than ABI 1.2, whose blocking generate runs on host threads
// (components::Engine). Such an engine learns a request's id only inside generate, so a cancel that
// comes before (the request still queued on the host, or its thread not yet inside generate) would
// be lost, and the request would run to max_new_tokens. Here a cancelled request is cancelled in
// the engine again every few milliseconds from the moment its generate starts until it returns.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <mutex>
#include <thread>

namespace mlpt::components {

class BlockingCancels {
 public:
  // `cancel_in_engine`: the engine's cancel of one id (its errors are ignored on repeats).
  explicit BlockingCancels(std::function<void(uint64_t)> cancel_in_engine);
  ~BlockingCancels();
  BlockingCancels(const BlockingCancels&) = delete;
  BlockingCancels& operator=(const BlockingCancels&) = delete;

  void queued(uint64_t id);    // submitted; its generate has not started
  void started(uint64_t id);   // on its thread, just before generate
  void finished(uint64_t id);  // its generate returned
  // The host's cancel: cancels in the engine now if the request runs, and again until it returns.
  void cancel(uint64_t id);

 private:
  struct Request {
    bool started = false, cancelled = false;
  };
  void repeat();

  std::function<void(uint64_t)> cancel_in_engine_;
  std::mutex mutex_;
  std::condition_variable changed_;
  std::map<uint64_t, Request> requests_;
  bool stop_ = false;
  std::thread repeater_;
};

}  // namespace mlpt::components
