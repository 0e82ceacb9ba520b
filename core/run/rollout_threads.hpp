// The host threads a run's rollouts get, from [run]: rollout_workers episodes in flight, their host
// work (harness, sandbox) on rollout_threads threads, and their grading on grading_threads more, so
// a hidden-test run never holds an episode's thread. The single-process run and every rollout
// worker of a distributed one make their pool here.
#pragma once

#include <memory>

#include "core/rollout/rollout_pool.hpp"
#include "core/run/run_config.hpp"

namespace mlpt::run {

std::unique_ptr<rollout::RolloutPool> make_rollout_pool(const RunSettings& run,
                                                        const rollout::EpisodeEnvironment& env);

}  // namespace mlpt::run
