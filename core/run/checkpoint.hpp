// Run checkpoints: after a step, the trainer's full state and the loop's position (step, samples,
// history) in <dir>/step_<N>/, written to a temporary folder and renamed, so a crash never leaves a
// half-written checkpoint that resume would trust.
#pragma once

#include <filesystem>
#include <functional>
#include <optional>
#include <vector>

#include "core/run/step_record.hpp"

namespace mlpt::run {

struct CheckpointState {
  int64_t step = 0, samples = 0;
  std::filesystem::path trainer_dir;
  std::vector<StepRecord> steps;
  std::vector<EvalRecord> evals;
};

// `save_trainer_state` writes the trainer's state into the folder it is given (one trainer, or a
// distributed run's trainer group).
void save_checkpoint(const std::filesystem::path& dir, int64_t step, int64_t samples,
                     const std::function<void(const std::filesystem::path&)>& save_trainer_state,
                     const std::vector<StepRecord>& steps, const std::vector<EvalRecord>& evals);
// The checkpoint with the highest step whose loop_state.json is complete; nullopt if none.
std::optional<CheckpointState> latest_checkpoint(const std::filesystem::path& dir);

}  // namespace mlpt::run
