// The benchmark loop (`mlpt run`): async GRPO through the ABI only, so any plugin combination runs
// it, over one placement interface wherever the components are (component_placement.hpp). Rollout workers generate groups continuously while the trainer trains the previous step;
// staleness is bounded by the scheduler; every step's weights go trainer -> transport -> engine;
// validation (pass@k) runs from the first eval point on; the MLPerf result log, a metrics JSONL, a
// progress line and an HTML report record it all.
#pragma once

#include <atomic>
#include <filesystem>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "core/run/component_placement.hpp"
#include "core/run/run_config.hpp"
#include "mlpt/mlpt.h"

namespace mlpt::run {

struct RunOptions {
  bool resume = false;                        // continue from the last checkpoint in output_dir
  const std::atomic<bool>* interrupted = nullptr;  // set by a signal handler: stop cleanly
  std::function<void(const std::string&)> progress;  // progress lines (default: stderr)
  double progress_interval_s = 5.0;
  // Called after each refit with the trainer's exported weights (the weights themselves go plugin
  // to plugin, dense or sparse: the host never sees the engine's side).
  std::function<void(uint64_t version, const mlpt_named_tensor* exported, size_t count)> after_refit;
  // Where the components run when not in this process: a distributed run's coordinator reaches
  // them on the other ranks (core/dist/mpi/distributed_run.hpp). NULL: this process loads them all.
  ComponentPlacement* placement = nullptr;
};

// RunSummary::abort_reason of a run that ran all its steps without reaching the target.
inline constexpr const char* kNotConvergedReason = "did not reach the target within max_steps";

struct RunSummary {
  bool converged = false;
  bool aborted = false;
  std::string abort_reason;
  int64_t steps = 0, samples = 0;
  double time_to_train_minutes = 0;  // run_start to run_stop, plus the earlier attempts' time when resumed
  int64_t resumed_from_step = -1;    // the checkpoint a resumed run started from; -1 for a fresh run
  double time_already_spent_minutes = 0;  // earlier attempts of a resumed run, run_start to their last line
  double first_step_reward = 0, last_step_reward = 0;
  double best_pass_at_k = 0;
  int64_t rollouts = 0, failed_rollouts = 0;  // every rollout that ended; those back-filled after an infrastructure failure
  std::filesystem::path result_log, metrics, report;
  std::vector<std::string> lost_workers;  // distributed runs: rollout workers dropped on the way, and why
  std::vector<std::pair<std::string, double>> time_split;  // the report's phases: seconds, summed over threads
};

RunSummary run_benchmark(const RunConfig& config, const RunOptions& options);

}  // namespace mlpt::run
