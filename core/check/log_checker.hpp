// The result-log compliance checker for qwen35_397b_grpo (docs/benchmark.md §6; the reference's
// mlperf_logging training_6.1.0 rule files common, {closed,open}_common and
// {closed,open}_qwen35_397b_grpo). It reads a parsed log and reports, rule by rule, what it checked,
// the evidence, and every violation with the line it is on.
//
// Line numbers are 1-based lines of the file. Line 0 means "the log as a whole": a key that never
// appears, or a property no single line has (no eval above the target).
//
// Closed division: every rule below. Open division, and why (the open rule files of the reference
// keep structure and the quality target and free the hyperparameters):
//   same as closed: well-formed lines; cache_clear, init_start/init_stop/run_start/run_stop order
//     and counts; run_stop status; block and eval markers carry samples_count; submission_* keys;
//     every hyperparameter key of §6 exactly once (the open rule file still lists each as
//     EXACTLY_ONE); seed an integer; max_sequence_length == 65536, init_checkpoint_step == 0 and
//     opt_name == "adamw" (kept by the open rule file: same task, same starting checkpoint);
//     eval_samples and train_samples positive integers; global_batch_size, num_prompts_per_step
//     and num_generations_per_prompt positive integers; each eval_accuracy has samples_count and a
//     value in [0, 1]; at least one eval_accuracy > 0.69 (the target is the benchmark itself).
//   changed: init_stop within 240 min of the first init_start (30 min closed).
//   not applied: LR and clip formulas, AdamW constants, warmup/schedule, sampling settings,
//     generations == 16, GBS == prompts × 16, GBS one of 256/512/1024, the eval schedule, the
//     logged target_accuracy value (the checker uses 0.69 itself), and gradient_accumulation_steps
//     being required (open: if logged, exactly once and > 0, a non-positive value being meaningless
//     in any division).
//
// Two verdicts. The merged rules (training_policies PR #598) and the stored MLCommons checker
// (mlcommons/logging 4.1.59, ruleset 6.1.0) disagree on a few points, so each rule says whose it is
// and the report gives both answers:
//   rules only: eval_samples == the validation task count (251, configurable); closed GBS one of
//     256/512/1024 (§2's table; the checker accepts any positive GBS).
//   checker only: eval_samples == 256 (the count before the rule change); key order: in the closed
//     division global_batch_size must come before opt_base_learning_rate, opt_gradient_clip_norm,
//     num_generations_per_prompt and every eval_accuracy, and num_prompts_per_step before
//     num_generations_per_prompt (the checker computes from the keys seen so far).
//   neither (a warning, `stricter`): an exactly-once key logged again with the same value (the
//     checker warns; a different value fails both); a second run_start, a run_stop status other than
//     success|aborted, submission_status, seed an integer, target_accuracy == 0.69 and
//     opt_end_learning_rate == the LR formula (closed).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/mllog/reader.hpp"

namespace mlpt::check {

enum class Division { closed, open };
std::string_view to_string(Division d);
std::optional<Division> parse_division(std::string_view text);  // "closed" | "open"

struct Violation {
  std::string rule;  // the RuleResult id it belongs to
  int64_t line = 0;  // 0: the log as a whole
  std::string message;
};

struct Finding {  // informational; never affects compliance
  int64_t line = 0;
  std::string message;
};

// Whose requirement a rule is: both the merged rules and the stored MLCommons checker, or one of them.
enum class Authority { both, rules_only, checker_only };

struct RuleResult {
  std::string id;           // e.g. "opt_base_learning_rate", "init_time", "eval_schedule"
  std::string description;  // what the rule requires, for a person
  std::string evidence;     // what the log showed (values and lines)
  std::vector<Violation> violations;
  // mlpt is stricter here than the MLCommons checker (which accepts the log): a failure is a
  // warning and does not change the verdict.
  bool stricter = false;
  Authority authority = Authority::both;
  bool counts_for_rules() const { return !stricter && authority != Authority::checker_only; }
  bool counts_for_checker() const { return !stricter && authority != Authority::rules_only; }
  bool passed() const { return violations.empty(); }
  bool warning() const { return stricter && !passed(); }
};

struct CheckOptions {
  std::optional<Division> division;            // nullopt: as the log declares (closed if it does not)
  // The validation task count the rules require of eval_samples; nullopt: the rules' 251.
  std::optional<int64_t> expected_eval_samples;
};

// From command-line text ("closed"/"open", "256"); throws mlpt::Error naming the bad option.
CheckOptions parse_check_options(const std::optional<std::string>& division,
                                 const std::optional<std::string>& eval_samples);

// The rule id of "at least one eval_accuracy above the target". A run that did not converge fails
// only this rule; the summary treats such a run as non-converged rather than non-compliant.
inline constexpr std::string_view kTargetRule = "eval_target";

struct LogReport {
  std::string source;
  Division division = Division::closed;
  std::vector<RuleResult> rules;
  std::vector<Finding> findings;

  // Facts about the run, when the log has them.
  std::optional<int64_t> seed;
  std::optional<int64_t> global_batch_size;
  std::optional<int64_t> run_start_ms, run_stop_ms;
  std::optional<std::string> run_stop_status;
  std::optional<int64_t> target_reached_line;     // first eval_accuracy > target within the run
  std::optional<int64_t> target_reached_samples;  // its samples_count
  std::optional<double> best_accuracy;
  // A resumed run (init_checkpoint_step > 0): the step it started from and the minutes its
  // earlier attempts ran (time_already_spent_ms). Such a log is not compliant: MLPerf times a run
  // from step 0 in one go.
  std::optional<int64_t> resumed_from_step;
  std::optional<double> time_already_spent_minutes;
  // Minutes run_start → run_stop (plus the earlier attempts' minutes of a resumed run); set only
  // when run_stop says success and the target was reached.
  std::optional<double> time_to_train_minutes;

  // The merged rules' verdict (the exit status of `mlpt check log`): every rule passed but the
  // stricter and the checker-only ones.
  bool compliant() const;
  // What the stored MLCommons checker would answer: every rule passed but the stricter and the
  // rules-only ones.
  bool checker_compliant() const;
  bool converged() const { return time_to_train_minutes.has_value(); }
  std::vector<Violation> violations() const;          // failing rules the merged rules count, by line
  std::vector<Violation> checker_violations() const;  // failing rules the stored checker counts, by line
  std::vector<Violation> warnings() const;            // the stricter rules' violations, by line
};

LogReport check_log(const mllog::ParsedLog& log, const CheckOptions& options = {});

nlohmann::json to_json(const LogReport& report);
// A table for a person: one row per rule (PASS/FAIL, rule, evidence), then violations by line,
// findings, the verdict and the time to train.
std::string format_report(const LogReport& report);

}  // namespace mlpt::check
