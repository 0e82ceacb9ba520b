// The complete commands of an `execute_bash` call, as OpenHands cuts them before running: one per
// top-level line (a line continued by `\`, an open quote, `$(`, a heredoc body, a pipe or `&&` at
// its end, or an open compound command stays with it). OpenHands answers a call of several with an
// error and runs nothing. Its parser (bashlex) gives up on some syntax and then runs the call
// whole; the cases it gives up on are listed in bash_split.cpp and treated the same way.
#pragma once

#include <string>
#include <vector>

namespace mlpt::openhands {

// The commands of `command` (already stripped): one element when it is a single command or when
// the parser gives up; [""] for an empty command. Text between commands (blank lines, comments)
// goes with the command before it, each piece right-stripped.
std::vector<std::string> split_bash_commands(const std::string& command);

// The observation for a call of several commands (before "[Error occurred in processing last action]").
std::string multiple_commands_error(const std::vector<std::string>& commands);

}  // namespace mlpt::openhands
