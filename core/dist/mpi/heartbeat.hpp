// Every rank but the coordinator tells the coordinator once a second that it is alive, from a
// thread of its own, so a rank that is killed, loses its node or hangs (a stopped process sends
// nothing) is noticed within [placement] heartbeat_timeout_s even while nothing else is asked of
// it. The coordinator counts any message as a sign of life (coordinator.hpp).
//
// The same thread takes the coordinator's "leave" notice (channel.hpp), sent to every rank of a
// rollout worker it drops when that worker is an engine group: the rank's other threads may wait
// in the group's collectives for the lost rank forever, so it runs `on_leave`, which ends the
// process (MpiSession::leave_job), whatever they are doing.
#pragma once

#include <condition_variable>
#include <functional>
#include <mutex>
#include <thread>

#include "core/dist/mpi/channel.hpp"

namespace mlpt::dist {

class Heartbeat {
 public:
  static constexpr int kIntervalMs = 1000;
  Heartbeat(MpiChannel& channel, int to, std::function<void()> on_leave);
  ~Heartbeat();  // stops beating
  Heartbeat(const Heartbeat&) = delete;
  Heartbeat& operator=(const Heartbeat&) = delete;

 private:
  std::mutex mutex_;
  std::condition_variable stop_;
  bool stopping_ = false;
  std::thread thread_;
};

}  // namespace mlpt::dist
