#include "core/components/blocking_cancels.hpp"

#include <chrono>
#include <vector>

namespace mlpt::components {

namespace {
constexpr auto kRepeatEvery = std::chrono::milliseconds(5);
}

BlockingCancels::BlockingCancels(std::function<void(uint64_t)> cancel_in_engine)
    : cancel_in_engine_(std::move(cancel_in_engine)), repeater_([this] { repeat(); }) {}

BlockingCancels::~BlockingCancels() {
  {
    std::lock_guard l(mutex_);
    stop_ = true;
  }
  changed_.notify_all();
  repeater_.join();
}

void BlockingCancels::queued(uint64_t id) {
  std::lock_guard l(mutex_);
  requests_[id] = Request{};
}

void BlockingCancels::started(uint64_t id) {
  {
    std::lock_guard l(mutex_);
    requests_[id].started = true;
  }
  changed_.notify_all();
}

void BlockingCancels::finished(uint64_t id) {
  std::lock_guard l(mutex_);
  requests_.erase(id);
}

void BlockingCancels::cancel(uint64_t id) {
  bool running = true;
  {
    std::lock_guard l(mutex_);
    if (auto it = requests_.find(id); it != requests_.end()) {
      it->second.cancelled = true;
      running = it->second.started;
    }
  }
  changed_.notify_all();
  if (running) cancel_in_engine_(id);  // an id not (or no longer) here goes to the engine as it is
}

// Cancels every cancelled request that runs, again and again, until its generate returns.
void BlockingCancels::repeat() {
  std::unique_lock l(mutex_);
  for (;;) {
    std::vector<uint64_t> due;
    for (const auto& [id, r] : requests_)
      if (r.started && r.cancelled) due.push_back(id);
    if (stop_) return;
    if (due.empty()) {
      changed_.wait(l);
      continue;
    }
    l.unlock();
    for (uint64_t id : due) {
      try {
        cancel_in_engine_(id);
      } catch (...) {  // it may have returned meanwhile: the engine no longer knows the id
      }
    }
    l.lock();
    changed_.wait_for(l, kRepeatEvery, [this] { return stop_; });
  }
}

}  // namespace mlpt::components
