// The end-of-run report: one self-contained HTML page with charts drawn by uPlot (vendored at build
// time and inlined): training reward and validation pass@k over samples with the target line, the
// trainer's loss, gradient norm and logprob error, masked sequences, staleness, and the time split
// between generation / environment / reward / training / weight transfer / validation (tick labels
// readable at any magnitude, scales fitted to the data); links to the run's timeline and
// TensorBoard folder; then throughput, the step table, and the worst and best training rollouts.
#pragma once

#include <filesystem>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/run/step_record.hpp"

namespace mlpt::run {

struct ReportInputs {
  std::string name;
  std::vector<StepRecord> steps;
  std::vector<EvalRecord> evals;
  std::vector<std::pair<std::string, double>> time_split;  // seconds, summed over threads
  bool converged = false;
  std::string abort_reason;
  double time_to_train_minutes = 0;
  int64_t rollouts = 0, generated_tokens = 0;
  // Rollout records (rollout_record.hpp) shown as transcripts, e.g. {"worst training rollout", ...}.
  std::vector<std::pair<std::string, nlohmann::json>> highlighted_rollouts;
  int64_t failed_rollouts = 0;            // infrastructure failures back-filled with reward 0
  std::vector<std::string> lost_workers;  // distributed runs: rollout workers dropped on the way, and why
  std::filesystem::path trace, tensorboard;  // the run's timeline (empty: none) and TensorBoard folder
};

void write_report(const std::filesystem::path& file, const ReportInputs& in);

}  // namespace mlpt::run
