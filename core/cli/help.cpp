#include "core/cli/help.hpp"

#include <unistd.h>

#include <algorithm>
#include <iostream>

namespace mlpt::cli {
namespace {

std::vector<Command> sorted_commands() {
  auto commands = command_registry();
  std::sort(commands.begin(), commands.end(), [](const Command& a, const Command& b) { return a.name < b.name; });
  return commands;
}

void print_row(const std::string& left, const std::string& summary) {
  constexpr size_t kColumn = 52;
  if (left.size() < kColumn) std::cout << left << std::string(kColumn - left.size(), ' ') << summary << "\n";
  else std::cout << left << "\n" << std::string(kColumn, ' ') << summary << "\n";
}

}  // namespace

std::filesystem::path executable_dir() {
  std::error_code ec;
  auto self = std::filesystem::read_symlink("/proc/self/exe", ec);
  return ec ? std::filesystem::path() : self.parent_path();
}

std::vector<std::string> external_tools(const std::filesystem::path& dir) {
  std::vector<std::string> words;
  std::error_code ec;
  if (dir.empty()) return words;
  for (const auto& e : std::filesystem::directory_iterator(dir, ec)) {
    const std::string name = e.path().filename().string();
    if (name.rfind("mlpt-", 0) == 0 && name.size() > 5 && e.is_regular_file(ec) && ::access(e.path().c_str(), X_OK) == 0)
      words.push_back(name.substr(5));
  }
  std::sort(words.begin(), words.end());
  return words;
}

void print_overview() {
  std::cout << "mlpt " << MLPT_VERSION << ": MLPerf LLM post-training (GRPO on SWE tasks)\n\n"
            << "usage: mlpt [--log-level debug|info|warning|error|off] COMMAND [ARGS...]\n\ncommands:\n";
  for (const auto& c : sorted_commands()) print_row("  mlpt " + c.name + " " + c.usage, c.summary);
  print_row("  mlpt help COMMAND", "help on one command (also: mlpt COMMAND --help)");
  const auto tools = external_tools(executable_dir());
  if (!tools.empty()) {
    std::cout << "\ntools (the executable mlpt-WORD beside this one):\n";
    for (const auto& w : tools) print_row("  mlpt " + w + " ...", "see mlpt " + w + " --help");
  }
  std::cout << "\nOther words run the tool mlpt-WORD from PATH, if there is one. The log level is also\n"
               "read from MLPT_LOG_LEVEL (default info).\n";
}

void print_command_help(const Command& c) {
  std::cout << "usage: mlpt " << c.name << " " << c.usage << "\n\n" << c.summary << "\n";
  if (!c.details.empty()) std::cout << "\n" << c.details << (c.details.back() == '\n' ? "" : "\n");
}

bool print_group_help(const std::string& group) {
  bool any = false;
  for (const auto& c : sorted_commands()) {
    if (c.name.rfind(group + " ", 0) != 0) continue;
    if (!any) std::cout << "usage: mlpt " << group << " SUB-COMMAND [ARGS...]\n\nsub-commands:\n";
    any = true;
    print_row("  mlpt " + c.name + " " + c.usage, c.summary);
  }
  if (any) std::cout << "\nmlpt " << group << " SUB-COMMAND --help says more about one.\n";
  return any;
}

}  // namespace mlpt::cli
