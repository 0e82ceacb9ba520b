// The run's rollout workers: episodes in flight up to a limit, their host work on a few threads and
// their grading on a few more, so a hidden-test run never holds an episode's thread. Training
// rollouts and validation share one pool, so neither keeps threads of its own.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <mutex>

#include "core/exec/executor.hpp"
#include "core/rollout/episode.hpp"
#include "core/rollout/episode_runner.hpp"

namespace mlpt::rollout {

class RolloutPool final : public EpisodeRunner {
 public:
  // `threads`: host threads for the episodes' host work; `max_episodes`: episodes in flight;
  // `grading_threads`: rollouts graded at once (0: as many as `threads`, the most that graded at
  // once when grading ran on them).
  RolloutPool(const EpisodeEnvironment& env, int threads, int64_t max_episodes, int grading_threads = 0);
  ~RolloutPool() override;  // waits for the episodes in flight
  RolloutPool(const RolloutPool&) = delete;
  RolloutPool& operator=(const RolloutPool&) = delete;

  // Blocks while `max_episodes` are in flight, then starts the episode; `done` runs once on a pool
  // thread (as in start_episode). Thread-safe.
  void start(EpisodeRequest request, EpisodeDone done) override;
  void wait_idle() override;  // blocks until no episode is in flight
  int64_t in_flight() const override;
  int threads() const { return pool_.threads(); }
  int grading_threads() const { return grading_.threads(); }

 private:
  EpisodeEnvironment env_;  // the run's, grading on grading_
  const int64_t max_episodes_;
  mutable std::mutex mutex_;
  std::condition_variable changed_;
  int64_t in_flight_ = 0;
  exec::WorkerPool grading_;
  exec::WorkerPool pool_;  // last: its threads stop first
};

}  // namespace mlpt::rollout
