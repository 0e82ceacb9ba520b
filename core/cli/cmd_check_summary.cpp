// `mlpt check summary LOG... [--division closed|open] [--eval-samples N] [--json]`: time to train
// of each run and the olympic average. Exit status: 0 scored, 1 no score (the reason is printed),
// 2 usage or I/O error.
#include <iostream>

#include "core/check/summary.hpp"
#include "core/cli/args.hpp"
#include "core/cli/command.hpp"

namespace mlpt::cli {
namespace {

int check_summary_command(const std::vector<std::string>& argv) {
  Args args(argv, {"--json"}, {"--division", "--eval-samples"});
  if (args.positionals().empty()) throw Error("missing argument: LOG... (one result log per run)");
  std::vector<std::filesystem::path> logs(args.positionals().begin(), args.positionals().end());
  auto summary = check::summarize_files(logs, check::parse_check_options(args.option("--division"), args.option("--eval-samples")));
  if (args.flag("--json")) std::cout << check::to_json(summary).dump(2) << "\n";
  else std::cout << check::format_summary(summary);
  return summary.scored() ? 0 : 1;
}

MLPT_COMMAND("check summary", "LOG... [--division closed|open] [--eval-samples N] [--json]",
             "time to train per run and the olympic average (0 scored, 1 no score)",
             check_summary_command);

}  // namespace
}  // namespace mlpt::cli
