// `mlpt check config`: the division rules applied to a run config before any GPU-hour is spent.
// Closed division: the hyperparameters and their formulas (docs/benchmark.md §2), 16 generations,
// GBS = prompts × 16 and one of the table's values, context 65536, 30 turns, sampling settings,
// the evaluation schedule (first point and k = 4), the dataset identity (declared SHA-256 of the
// task files, checked against the files) and a stated max staleness. Open division: the same
// structure (16 generations, GBS = prompts × 16, context, turns, evaluation k and target, stated
// staleness, dataset identity) with the hyperparameters free. The reward's grading mode: the closed
// division requires `grading_mode = "reference"` (R2E-Gym's grading), the open division accepts
// "reference" or "hardened". Both: every component's plugin loads.
#pragma once

#include <nlohmann/json.hpp>

#include "core/check/log_checker.hpp"
#include "core/run/run_config.hpp"

namespace mlpt::check {

struct ConfigReport {
  std::string source;
  Division division = Division::closed;
  std::vector<RuleResult> rules;
  std::vector<std::string> unverified;  // rule ids whose evidence is not on this machine
  bool compliant() const;
};

// `division`: nullopt = as the config's [run].division says. `load_plugins`: also load every
// component's plugin (a missing or broken plugin, or a component it does not provide, fails).
ConfigReport check_config(const run::RunConfig& config, std::optional<Division> division = std::nullopt, bool load_plugins = true);
nlohmann::json to_json(const ConfigReport& report);
std::string format_report(const ConfigReport& report);

}  // namespace mlpt::check
