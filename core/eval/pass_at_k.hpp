// Validation metrics over tasks with k rollouts each: pass@k (the benchmark's score: a task passes
// when any of its k rollouts has reward 1), pass@1 (mean reward) and pass^k (all k pass), for
// information.
#pragma once

#include <vector>

namespace mlpt::eval {

struct PassAtK {
  double pass_at_k = 0;   // fraction of tasks with at least one success
  double pass_at_1 = 0;   // mean over all rollouts
  double pass_hat_k = 0;  // fraction of tasks where every rollout succeeded
  int tasks = 0, k = 0;
};

// rewards[task][rollout], each 0 or 1; every task must have the same number k >= 1 of rollouts.
PassAtK pass_at_k(const std::vector<std::vector<double>>& rewards);

}  // namespace mlpt::eval
