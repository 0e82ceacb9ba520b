// Finished rollouts gathered into GRPO groups (all generations of one prompt), each tagged with the
// weight versions that generated it. The trainer takes the groups of one step in dataset order.
#pragma once

#include <condition_variable>
#include <functional>
#include <map>
#include <mutex>
#include <vector>

#include "core/rollout/trajectory.hpp"

namespace mlpt::rl {

struct Group {
  int64_t prompt_index = 0;
  std::vector<rollout::Trajectory> samples;  // ordered by sample_index
  uint64_t min_weight_version() const;
};

class GroupBuffer {
 public:
  explicit GroupBuffer(int generations_per_prompt) : generations_(generations_per_prompt) {}

  // Thread-safe. A group becomes ready when all its generations have arrived.
  void add(rollout::Trajectory trajectory);

  // Blocks until the groups of prompts [first, first + count) are all ready, then removes and
  // returns them in prompt order. Returns an empty vector if `stopped()` turns true while waiting.
  std::vector<Group> take(int64_t first, int64_t count, const std::function<bool()>& stopped);

  // Wakes take() so it can observe stopped().
  void notify();
  int64_t ready_groups() const;

 private:
  int generations_;
  mutable std::mutex mutex_;
  std::condition_variable changed_;
  std::map<int64_t, Group> groups_;  // by prompt index, complete or filling
};

}  // namespace mlpt::rl
