// `mlpt config reference`: every run-config key with its type, default and meaning, as Markdown
// (what docs/config-reference.md holds).
#include <iostream>

#include "core/cli/args.hpp"
#include "core/cli/command.hpp"
#include "core/run/config_reference.hpp"

namespace mlpt::cli {
namespace {

int config_reference(const std::vector<std::string>& argv) {
  Args args(argv, {}, {});
  if (!args.positionals().empty()) throw Error("unexpected argument '" + args.positionals()[0] + "'");
  std::cout << run::config_reference_markdown();
  return 0;
}

}  // namespace

MLPT_COMMAND("config reference", "", "every run-config key: type, default, meaning (Markdown)", &config_reference);

}  // namespace mlpt::cli
