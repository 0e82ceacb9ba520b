// What a run adds up as it goes, from the rollout threads and the loop: the time split by phase
// (summed over threads), the tokens generated and the rollouts that ended or failed.
#pragma once

#include <cstdint>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "core/rollout/trajectory.hpp"

namespace mlpt::run {

struct RunTotals {
  std::mutex m;
  double generation_s = 0, environment_s = 0, reward_s = 0, core_s = 0;
  double training_s = 0, weight_transfer_s = 0, validation_s = 0;
  int64_t generated_tokens = 0, rollouts = 0;
  // Every rollout that ended (training and validation), and those that failed for an infrastructure
  // reason and were back-filled: the failure rate's two counts.
  int64_t finished_rollouts = 0, failed_rollouts = 0;

  void add(const rollout::Trajectory& t) {
    std::lock_guard l(m);
    generation_s += t.generation_s, environment_s += t.environment_s, reward_s += t.reward_s,
        core_s += t.core_s;
    generated_tokens += t.generated_tokens();
    ++rollouts, ++finished_rollouts;
  }
  void add_validation() {
    std::lock_guard l(m);
    ++finished_rollouts;
  }
  // Adds `seconds` to one of the loop's phases (a member above).
  void add_time(double RunTotals::*phase, double seconds) {
    std::lock_guard l(m);
    this->*phase += seconds;
  }
  // The report's phases, in its order (with `m` held).
  std::vector<std::pair<std::string, double>> time_split() const {
    return {{"generation", generation_s}, {"environment", environment_s},
            {"reward", reward_s},         {"core", core_s},
            {"training", training_s},     {"weight transfer", weight_transfer_s},
            {"validation", validation_s}};
  }
};

}  // namespace mlpt::run
