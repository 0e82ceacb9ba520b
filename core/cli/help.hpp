// Help for `mlpt`: the command list (`mlpt --help`), one command's help (`mlpt CMD --help`,
// `mlpt help CMD`), a group's sub-commands (`mlpt check`), and the external tools (`mlpt-WORD`
// beside the executable) listed with the built-in commands.
#pragma once

#include <filesystem>
#include <string>
#include <vector>

#include "core/cli/command.hpp"

namespace mlpt::cli {

// The folder of the running executable, where external tools are looked up first.
std::filesystem::path executable_dir();
// Words WORD of the executables mlpt-WORD in `dir`, sorted.
std::vector<std::string> external_tools(const std::filesystem::path& dir);

void print_overview();
void print_command_help(const Command& command);
// The commands whose name starts with `group` (e.g. "check"); false if there are none.
bool print_group_help(const std::string& group);

}  // namespace mlpt::cli
