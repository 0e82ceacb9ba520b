// `mlpt check log RESULT.txt [--division closed|open] [--eval-samples N] [--json]`: checks one
// MLPerf result log against the merged rules and says what the stored MLCommons checker would
// answer. Exit status: 0 compliant with both, 1 violations of the rules, 2 usage or I/O error (the
// dispatcher turns mlpt::Error into 2), 3 compliant with the rules but failed by the stored checker
// (which still wants eval_samples == 256 and a key order the rules do not ask for).
#include <iostream>

#include "core/check/log_checker.hpp"
#include "core/cli/args.hpp"
#include "core/cli/command.hpp"

namespace mlpt::cli {
namespace {

int check_log_command(const std::vector<std::string>& argv) {
  Args args(argv, {"--json"}, {"--division", "--eval-samples"});
  if (args.positionals().size() != 1)
    throw Error("expected exactly one result log, got " + std::to_string(args.positionals().size()));
  auto options = check::parse_check_options(args.option("--division"), args.option("--eval-samples"));
  auto report = check::check_log(mllog::parse_log_file(args.positional(0, "RESULT.txt")), options);
  if (args.flag("--json")) std::cout << check::to_json(report).dump(2) << "\n";
  else std::cout << check::format_report(report);
  if (!report.compliant()) return 1;
  return report.checker_compliant() ? 0 : 3;
}

MLPT_COMMAND("check log", "RESULT.txt [--division closed|open] [--eval-samples N] [--json]",
             "check a result log against the merged rules and the MLCommons checker (0 ok, 1 violations, 3 "
             "only the checker fails)",
             check_log_command);

}  // namespace
}  // namespace mlpt::cli
