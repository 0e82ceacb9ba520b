// One entry of a ring that many threads write without a lock and readers copy while it may change:
// a seqlock whose stamp also says which of the calls that map to the entry it holds. Call k (the
// k-th handed a place in the ring) is written as stamp 2·k+1, kept as 2·k+2.
//
// When the ring comes all the way round while a writer is preempted inside an entry, a newer call
// maps to the same entry. The newer one waits for the older to finish (never two writers at once,
// so no record is torn), and an older call that finds a newer one there gives up (the ring has
// already dropped it). So the stamp only grows and the newest call is the one that stays.
#pragma once

#include <atomic>
#include <cstdint>
#include <thread>

namespace mlpt::observe {

template <class T>
class StampedSlot {
 public:
  // Makes this thread the one writer of the slot for call k. False when a newer call took it.
  bool claim(uint64_t k) {
    uint64_t now = stamp_.load(std::memory_order_relaxed);
    for (int spins = 0;; ++spins) {
      if (now >= 2 * k + 1) return false;
      if (now % 2 == 1) {  // an older call is being written
        if (spins > 64) std::this_thread::yield();
        now = stamp_.load(std::memory_order_relaxed);
      } else if (stamp_.compare_exchange_weak(now, 2 * k + 1, std::memory_order_acquire,
                                              std::memory_order_relaxed)) {
        return true;
      }
    }
  }
  // After a claim of call k: writes its value and keeps it.
  void publish(uint64_t k, const T& value) {
    std::atomic_thread_fence(std::memory_order_release);
    value_ = value;
    stamp_.store(2 * k + 2, std::memory_order_release);
  }
  // Copies call k's value into `out`; false when the slot holds another call or is being written.
  bool read(uint64_t k, T& out) const {
    if (stamp_.load(std::memory_order_acquire) != 2 * k + 2) return false;
    out = value_;
    std::atomic_thread_fence(std::memory_order_acquire);
    return stamp_.load(std::memory_order_relaxed) == 2 * k + 2;
  }

 private:
  std::atomic<uint64_t> stamp_{0};
  T value_{};
};

}  // namespace mlpt::observe
