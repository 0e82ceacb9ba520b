// The score of a submission: time to train of each run and their olympic average (docs/benchmark.md §1).
//
// The benchmark requires exactly 3 runs (rules::kRunsPerSubmission): the score is the time of the
// middle one, i.e. the fastest and the slowest are dropped. One run may fail to converge; it then
// counts as the slowest and is the one dropped. More than one non-converged run: no score.
// Other counts: fewer than 3 runs cannot be scored (nothing is left after dropping two); more than
// 3 are scored the same way (drop one fastest and one slowest, mean of the rest, still at most one
// non-converged) and the summary says the count is not the benchmark's.
//
// A run counts only when its log is compliant apart from not reaching the target; any other
// violation, duplicated seeds (seeds must be unique per run) or mixed divisions refuse the score.
#pragma once

#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/check/log_checker.hpp"

namespace mlpt::check {

// Olympic average of run times in minutes; nullopt = the run did not converge. Throws mlpt::Error
// (MLPT_FAILED_PRECONDITION) with the reason when it cannot score.
double olympic_average(const std::vector<std::optional<double>>& minutes);

struct Summary {
  std::vector<LogReport> runs;
  std::optional<double> score_minutes;  // set when scored
  std::string refusal;                  // why there is no score (empty when scored)
  std::vector<std::string> notes;       // e.g. "5 runs; the benchmark requires 3"
  bool scored() const { return score_minutes.has_value(); }
};

Summary summarize(std::vector<LogReport> runs);
// Reads and checks each file (options apply to all). Throws mlpt::Error when a file cannot be read.
Summary summarize_files(const std::vector<std::filesystem::path>& logs, const CheckOptions& options = {});

nlohmann::json to_json(const Summary& summary);
std::string format_summary(const Summary& summary);

}  // namespace mlpt::check
