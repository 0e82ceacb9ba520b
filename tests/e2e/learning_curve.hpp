// What the letters runs' tests call learning, read from a run's metrics.jsonl. A run learned when
// it reached the validation target (pass@4 >= 0.69 where a random policy scores about 0.06: the
// benchmark's own criterion), or when its training reward over the last three steps ends clearly
// above the first step's. The whole curve goes into the message, so a failure shows whether the run
// never learned or learned and fell off again.
#pragma once

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace mlpt_test {

struct LearningCurve {
  std::vector<double> rewards;     // reward_mean per step
  std::vector<int64_t> staleness;  // max_staleness per step

  double start() const { return rewards.front(); }
  double end() const { return (rewards[rewards.size() - 1] + rewards[rewards.size() - 2] + rewards[rewards.size() - 3]) / 3; }
  bool learned(bool converged) const { return converged || end() > start() + 0.3; }

  std::string describe(bool converged) const {
    std::string text = "reward " + std::to_string(start()) + " at step 1 -> " + std::to_string(end()) + " over the last 3 of " +
                       std::to_string(rewards.size()) + " steps (" + (converged ? "converged" : "not converged") + "); per step:";
    for (double r : rewards) {
      char cell[16];
      std::snprintf(cell, sizeof cell, " %.2f", r);
      text += cell;
    }
    return text;
  }
};

inline LearningCurve read_learning_curve(const std::filesystem::path& metrics_jsonl) {
  LearningCurve c;
  std::ifstream in(metrics_jsonl);
  for (std::string line; std::getline(in, line);) {
    const auto row = nlohmann::json::parse(line);
    c.rewards.push_back(row.at("reward_mean").get<double>());
    c.staleness.push_back(row.at("max_staleness").get<int64_t>());
  }
  return c;
}

}  // namespace mlpt_test
