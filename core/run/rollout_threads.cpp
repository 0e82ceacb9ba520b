#include "core/run/rollout_threads.hpp"

#include <algorithm>

namespace mlpt::run {

std::unique_ptr<rollout::RolloutPool> make_rollout_pool(const RunSettings& run,
                                                        const rollout::EpisodeEnvironment& env) {
  // More host threads than episodes in flight would only wait.
  const auto threads = static_cast<int>(std::min(run.rollout_threads, run.rollout_workers));
  return std::make_unique<rollout::RolloutPool>(env, threads, run.rollout_workers,
                                                static_cast<int>(run.grading_threads));
}

}  // namespace mlpt::run
