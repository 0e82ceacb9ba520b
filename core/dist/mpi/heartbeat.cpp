#include "core/dist/mpi/heartbeat.hpp"

#include <chrono>

#include "core/error.hpp"

namespace mlpt::dist {

Heartbeat::Heartbeat(MpiChannel& channel, int to, std::function<void()> on_leave) {
  thread_ = std::thread([this, &channel, to, on_leave = std::move(on_leave)] {
    std::unique_lock l(mutex_);
    while (!stopping_) {
      l.unlock();
      try {
        channel.send(to, "heartbeat");
        if (auto notice = channel.poll_notice(to); notice && notice->kind == "leave") on_leave();
      } catch (const Error&) {  // the coordinator is gone: the rank's own loop finds out
      }
      l.lock();
      stop_.wait_for(l, std::chrono::milliseconds(kIntervalMs), [this] { return stopping_; });
    }
  });
}

Heartbeat::~Heartbeat() {
  {
    std::lock_guard l(mutex_);
    stopping_ = true;
  }
  stop_.notify_all();
  thread_.join();
}

}  // namespace mlpt::dist
