// The conformance suite (`mlpt check plugins`): loads a plugin combination and checks, per
// component, that behaviour matches the ABI's contract and the declared capabilities. The same
// suite runs on the reference plugins in CI and on a submitter's own .so files. Every check records
// pass/fail with its evidence; a component that cannot even be created fails its first check and
// the rest of its checks are skipped (reported, not counted as passes). A check whose promise does
// not apply to the component (a capability it does not declare, a tool it does not have) is "not
// applicable": reported with the reason, never counted as passed.
#pragma once

#include <filesystem>

#include <nlohmann/json.hpp>

#include "core/run/run_config.hpp"

namespace mlpt::check {

struct ConformanceCheck {
  std::string component;  // e.g. "engine qwen35_cpu"
  std::string id;         // e.g. "same_seed_same_tokens"
  // skipped: could not run here (missing input, an earlier failure); not_applicable: the promise does not
  // apply to this component (e.g. a capability it does not declare).
  enum class Status { pass, fail, skipped, not_applicable } status = Status::pass;
  std::string evidence;
};

struct ConformanceReport {
  std::string source;
  std::vector<ConformanceCheck> checks;
  bool passed() const;
};

struct ConformanceOptions {
  // JSONL rows {"instance_id", "patch"}: golden patches for the reward checks. Empty: the
  // golden.jsonl next to the training set, if there is one.
  std::filesystem::path golden;
};

ConformanceReport check_plugins(const run::RunConfig& config, const ConformanceOptions& options = {});
nlohmann::json to_json(const ConformanceReport& report);
std::string format_report(const ConformanceReport& report);

}  // namespace mlpt::check
