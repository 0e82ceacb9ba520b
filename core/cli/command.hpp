// Sub-commands of `mlpt`. Each lives in its own file and registers itself with MLPT_COMMAND, so
// adding a command never edits a central list. Names may have several words ("check log"); the
// dispatcher picks the longest registered name that prefixes the arguments.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace mlpt::cli {

struct Command {
  std::string name;     // e.g. "plugins inspect"
  std::string usage;    // e.g. "PATH.so [--json]"
  std::string summary;  // one line for `mlpt --help`
  int (*run)(const std::vector<std::string>& args);  // args after the name; returns exit status
  std::string details = {};  // more for `mlpt CMD --help`: options, exit status (may be empty)
};

std::vector<Command>& command_registry();

struct CommandRegistration {
  explicit CommandRegistration(Command command) { command_registry().push_back(std::move(command)); }
};

}  // namespace mlpt::cli

#define MLPT_CLI_CONCAT_(a, b) a##b
#define MLPT_CLI_CONCAT(a, b) MLPT_CLI_CONCAT_(a, b)
#define MLPT_COMMAND(...) \
  static ::mlpt::cli::CommandRegistration MLPT_CLI_CONCAT(mlpt_command_, __LINE__)({__VA_ARGS__})
