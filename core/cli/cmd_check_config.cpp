// `mlpt check config CONFIG.toml [--division closed|open] [--json] [--rules-only]`: exit 0 compliant, 1 violations.
// --rules-only skips loading the components' plugins (e.g. a GPU config checked on a machine without its plugins).
#include <iostream>

#include "core/check/config_checker.hpp"
#include "core/cli/args.hpp"
#include "core/cli/command.hpp"

namespace mlpt::cli {
namespace {

int check_config(const std::vector<std::string>& argv) {
  Args args(argv, {"--json", "--rules-only"}, {"--division"});
  auto config = run::read_run_config(args.positional(0, "CONFIG.toml"));
  std::optional<check::Division> division;
  if (auto d = args.option("--division")) {
    division = check::parse_division(*d);
    if (!division) throw Error("--division must be closed or open, got " + *d);
  }
  auto report = check::check_config(config, division, !args.flag("--rules-only"));
  if (args.flag("--json")) std::cout << check::to_json(report).dump(2) << "\n";
  else std::cout << check::format_report(report);
  return report.compliant() ? 0 : 1;
}

}  // namespace

MLPT_COMMAND("check config", "CONFIG.toml [--division closed|open] [--json] [--rules-only]",
             "check a run config against the division's rules and load its plugins", &check_config);

}  // namespace mlpt::cli
