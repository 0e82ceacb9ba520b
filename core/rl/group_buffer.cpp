#include "core/rl/group_buffer.hpp"

#include <algorithm>
#include <chrono>

#include "core/error.hpp"

namespace mlpt::rl {

uint64_t Group::min_weight_version() const {
  uint64_t v = UINT64_MAX;
  for (const auto& s : samples) v = std::min(v, s.min_weight_version);
  return samples.empty() ? 0 : v;
}

void GroupBuffer::add(rollout::Trajectory trajectory) {
  std::lock_guard lock(mutex_);
  auto& group = groups_[trajectory.prompt_index];
  group.prompt_index = trajectory.prompt_index;
  for (const auto& s : group.samples)
    if (s.sample_index == trajectory.sample_index)
      throw Error(MLPT_INTERNAL, "rollout " + std::to_string(trajectory.sample_index) + " of prompt " +
                                     std::to_string(trajectory.prompt_index) + " arrived twice");
  group.samples.push_back(std::move(trajectory));
  if (static_cast<int>(group.samples.size()) == generations_) {
    std::sort(group.samples.begin(), group.samples.end(),
              [](const auto& a, const auto& b) { return a.sample_index < b.sample_index; });
    changed_.notify_all();
  }
}

std::vector<Group> GroupBuffer::take(int64_t first, int64_t count, const std::function<bool()>& stopped) {
  std::unique_lock lock(mutex_);
  auto ready = [&] {
    for (int64_t p = first; p < first + count; ++p) {
      auto it = groups_.find(p);
      if (it == groups_.end() || static_cast<int>(it->second.samples.size()) != generations_) return false;
    }
    return true;
  };
  while (!ready()) {
    if (stopped()) return {};
    changed_.wait_for(lock, std::chrono::milliseconds(200));
  }
  std::vector<Group> out;
  for (int64_t p = first; p < first + count; ++p) {
    out.push_back(std::move(groups_.at(p)));
    groups_.erase(p);
  }
  return out;
}

void GroupBuffer::notify() { changed_.notify_all(); }

int64_t GroupBuffer::ready_groups() const {
  std::lock_guard lock(mutex_);
  int64_t n = 0;
  for (const auto& [p, g] : groups_) n += static_cast<int>(g.samples.size()) == generations_;
  return n;
}

}  // namespace mlpt::rl
