// The simulation's discrete-event clock: callbacks run in time order, ties in the order they were
// scheduled, so a run is a pure function of its inputs (no threads, no wall clock).
#pragma once

#include <cstdint>
#include <functional>
#include <queue>
#include <vector>

namespace mlpt::coordinator_sim {

class EventClock {
 public:
  double now() const { return now_; }
  void at(double time, std::function<void()> action) { events_.push({time, seq_++, std::move(action)}); }
  void after(double delay, std::function<void()> action) { at(now_ + delay, std::move(action)); }
  // Runs events until none is left or `done` turns true.
  void run(const std::function<bool()>& done) {
    while (!events_.empty() && !done()) {
      Event e = events_.top();
      events_.pop();
      now_ = e.time;
      e.action();
    }
  }

 private:
  struct Event {
    double time;
    uint64_t seq;
    std::function<void()> action;
    bool operator>(const Event& o) const { return time != o.time ? time > o.time : seq > o.seq; }
  };
  std::priority_queue<Event, std::vector<Event>, std::greater<>> events_;
  double now_ = 0;
  uint64_t seq_ = 0;
};

}  // namespace mlpt::coordinator_sim
