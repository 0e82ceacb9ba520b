#include "core/rl/rollout_scheduler.hpp"

#include <chrono>

namespace mlpt::rl {

RolloutScheduler::RolloutScheduler(int64_t prompts_per_step, int32_t generations, int64_t max_age,
                                   int64_t max_steps)
    : prompts_per_step_(prompts_per_step), max_age_(max_age), max_steps_(max_steps), generations_(generations) {}

bool RolloutScheduler::may_start_locked() const {
  if (paused_ || stopped_) return false;
  if (handed_out_all_locked()) return false;
  return static_cast<int64_t>(version_) >= next_prompt_ / prompts_per_step_ - max_age_;
}

bool RolloutScheduler::handed_out_all_locked() const { return next_prompt_ / prompts_per_step_ >= max_steps_; }

RolloutJob RolloutScheduler::hand_out_locked() {
  RolloutJob job{next_prompt_, next_sample_};
  if (++next_sample_ == generations_) next_sample_ = 0, ++next_prompt_;
  ++in_flight_;
  return job;
}

std::optional<RolloutJob> RolloutScheduler::next() {
  std::unique_lock lock(mutex_);
  changed_.wait(lock, [&] { return stopped_ || may_start_locked() || handed_out_all_locked(); });
  if (stopped_ || handed_out_all_locked()) return std::nullopt;
  return hand_out_locked();
}

std::optional<RolloutJob> RolloutScheduler::try_next() {
  std::lock_guard lock(mutex_);
  if (!may_start_locked()) return std::nullopt;
  return hand_out_locked();
}

void RolloutScheduler::done() {
  std::lock_guard lock(mutex_);
  --in_flight_;
  changed_.notify_all();
}

void RolloutScheduler::set_weight_version(uint64_t version) {
  std::lock_guard lock(mutex_);
  version_ = version;
  changed_.notify_all();
}

void RolloutScheduler::skip_to(int64_t prompt_index) {
  std::lock_guard lock(mutex_);
  next_prompt_ = prompt_index;
  next_sample_ = 0;
}

void RolloutScheduler::pause() {
  std::lock_guard lock(mutex_);
  paused_ = true;
}

void RolloutScheduler::resume() {
  std::lock_guard lock(mutex_);
  paused_ = false;
  changed_.notify_all();
}

void RolloutScheduler::wait_idle(const std::function<bool()>& stop) {
  std::unique_lock lock(mutex_);
  while (in_flight_ != 0 && !stopped_ && !stop()) changed_.wait_for(lock, std::chrono::milliseconds(100));
}

void RolloutScheduler::stop() {
  std::lock_guard lock(mutex_);
  stopped_ = true;
  changed_.notify_all();
}

int64_t RolloutScheduler::in_flight() const {
  std::lock_guard lock(mutex_);
  return in_flight_;
}

bool RolloutScheduler::stopped() const {
  std::lock_guard lock(mutex_);
  return stopped_;
}

}  // namespace mlpt::rl
