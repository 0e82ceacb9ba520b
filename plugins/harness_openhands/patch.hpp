// The agent's patch as the benchmark takes it (docs/benchmark.md §4): `git add -A; git diff --cached
// <base_commit>` in /testbed, with the file sections of binary changes dropped.
#pragma once

#include <string>
#include <vector>

namespace mlpt::openhands {

// Removes every "diff --git" section that carries a binary change ("Binary files ... differ" or a
// "GIT binary patch"); text sections are kept byte for byte.
std::string drop_binary_diffs(const std::string& diff);

// The shell command that stages everything and prints the diff against `base`.
std::string patch_command(const std::string& workspace, const std::string& base);

// Untracked files (repository-relative) from `git ls-files --others` output, one per line.
std::vector<std::string> split_lines(const std::string& text);

}  // namespace mlpt::openhands
