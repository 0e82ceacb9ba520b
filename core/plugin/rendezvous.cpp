#include "core/plugin/rendezvous.hpp"

#include <chrono>

#include "core/error.hpp"

namespace mlpt::plugin {

LocalRendezvous::LocalRendezvous() {
  process_ = mlpt_process_info{MLPT_PROCESS_INFO_STRUCT_SIZE, 0, 1, 0, 1, 0, 1, MLPT_PROCESS_ROLE_ALL};
}

void LocalRendezvous::put(const std::string& key, const std::string& value) {
  if (key.empty()) throw Error(MLPT_INVALID_ARGUMENT, "kv_put: the key is empty");
  std::lock_guard lock(mutex_);
  auto [it, inserted] = values_.emplace(key, value);
  if (!inserted && it->second != value)
    throw Error(MLPT_ALREADY_EXISTS, "kv_put: key '" + key + "' already holds another value (keys are written once)");
  changed_.notify_all();
}

std::string LocalRendezvous::get(const std::string& key, int64_t timeout_ms, const std::atomic<bool>& cancelled) {
  using Clock = std::chrono::steady_clock;
  // Cancellation is a flag, not a notification: wake up every 50 ms to look at it.
  constexpr auto kPoll = std::chrono::milliseconds(50);
  const auto deadline = Clock::now() + std::chrono::milliseconds(timeout_ms < 0 ? 0 : timeout_ms);
  std::unique_lock lock(mutex_);
  for (;;) {
    if (auto it = values_.find(key); it != values_.end()) return it->second;
    if (cancelled.load()) throw Error(MLPT_CANCELLED, "kv_get: cancelled while waiting for key '" + key + "'");
    auto now = Clock::now();
    if (timeout_ms >= 0 && now >= deadline)
      throw Error(MLPT_DEADLINE_EXCEEDED, "kv_get: key '" + key + "' was not put within " + std::to_string(timeout_ms) + " ms");
    auto wake = timeout_ms < 0 ? now + kPoll : std::min(deadline, now + kPoll);
    changed_.wait_until(lock, wake);
  }
}

void LocalRendezvous::barrier(const std::string& name, int64_t, const std::atomic<bool>& cancelled) {
  if (name.empty()) throw Error(MLPT_INVALID_ARGUMENT, "barrier: the name is empty");
  if (cancelled.load()) throw Error(MLPT_CANCELLED, "barrier '" + name + "': cancelled");
  // The only process of the run has arrived.
}

}  // namespace mlpt::plugin
