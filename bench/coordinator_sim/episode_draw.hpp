// One episode's work, drawn before it runs: its replies (tokens to decode), the sandbox commands
// between them and the grading test run. Drawn from a seed made of (run seed, prompt, sample), so
// the same rollout costs the same work under every placement (common random numbers: placements
// differ by their scheduling, not by luck).
#pragma once

#include <cstdint>
#include <vector>

#include "bench/coordinator_sim/simulation_model.hpp"

namespace mlpt::coordinator_sim {

struct EpisodeWork {
  double sandbox_start_s = 0;
  std::vector<double> reply_tokens;  // one per agent iteration
  std::vector<double> command_s;     // the sandbox command after each reply
  double test_s = 0;                 // grading, capped at the training or validation test timeout
  int64_t tokens = 0;                // the trajectory's length: prompt, replies and observations, capped at the context
};

EpisodeWork draw_episode(const EpisodeModel& model, uint64_t run_seed, int64_t prompt_index, int64_t sample_index,
                         bool validation);

}  // namespace mlpt::coordinator_sim
