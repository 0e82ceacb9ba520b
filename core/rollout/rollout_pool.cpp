#include "core/rollout/rollout_pool.hpp"

#include <algorithm>

namespace mlpt::rollout {

RolloutPool::RolloutPool(const EpisodeEnvironment& env, int threads, int64_t max_episodes, int grading_threads)
    : env_(env), max_episodes_(std::max<int64_t>(max_episodes, 1)), grading_(grading_threads > 0 ? grading_threads : threads),
      pool_(threads) {
  env_.grading = &grading_;
}

RolloutPool::~RolloutPool() { wait_idle(); }

void RolloutPool::start(EpisodeRequest request, EpisodeDone done) {
  {
    std::unique_lock l(mutex_);
    changed_.wait(l, [&] { return in_flight_ < max_episodes_; });
    ++in_flight_;
  }
  start_episode(env_, std::move(request), pool_, [this, done = std::move(done)](Trajectory&& t, std::exception_ptr e) {
    done(std::move(t), e);
    std::lock_guard l(mutex_);  // notified under the lock: a destructor waiting for 0 cannot pass before
    --in_flight_;
    changed_.notify_all();
  });
}

void RolloutPool::wait_idle() {
  std::unique_lock l(mutex_);
  changed_.wait(l, [&] { return in_flight_ == 0; });
}

int64_t RolloutPool::in_flight() const {
  std::lock_guard l(mutex_);
  return in_flight_;
}

}  // namespace mlpt::rollout
