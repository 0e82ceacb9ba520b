// The ids of the episodes in flight, so that stopping a run can cancel them. Thread-safe.
#pragma once

#include <cstdint>
#include <mutex>
#include <set>
#include <vector>

namespace mlpt::run {

class InFlightRequests {
 public:
  void add(uint64_t id) {
    std::lock_guard l(m_);
    ids_.insert(id);
  }
  void remove(uint64_t id) {
    std::lock_guard l(m_);
    ids_.erase(id);
  }
  std::vector<uint64_t> snapshot() const {
    std::lock_guard l(m_);
    return {ids_.begin(), ids_.end()};
  }

 private:
  mutable std::mutex m_;
  std::set<uint64_t> ids_;
};

}  // namespace mlpt::run
