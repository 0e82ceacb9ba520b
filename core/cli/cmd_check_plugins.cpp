// `mlpt check plugins CONFIG.toml [--json] [--golden FILE.jsonl]`: the conformance suite on the config's plugin combination.
#include <iostream>

#include "core/check/conformance.hpp"
#include "core/cli/args.hpp"
#include "core/cli/command.hpp"

namespace mlpt::cli {
namespace {

int check_plugins(const std::vector<std::string>& argv) {
  Args args(argv, {"--json"}, {"--golden"});
  auto config = run::read_run_config(args.positional(0, "CONFIG.toml"));
  check::ConformanceOptions options;
  if (auto golden = args.option("--golden")) options.golden = *golden;
  auto report = check::check_plugins(config, options);
  if (args.flag("--json")) std::cout << check::to_json(report).dump(2) << "\n";
  else std::cout << check::format_report(report);
  return report.passed() ? 0 : 1;
}

}  // namespace

MLPT_COMMAND("check plugins", "CONFIG.toml [--json] [--golden FILE.jsonl]", "run the conformance suite on a plugin combination", &check_plugins);

}  // namespace mlpt::cli
