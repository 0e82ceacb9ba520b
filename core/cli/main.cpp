// `mlpt`: dispatches to the registered sub-command whose name is the longest prefix of the
// arguments. A first word no command has is looked up as an external tool `mlpt-WORD` beside this
// executable (as git does), which is how a plugin ships its own commands (e.g. `mlpt model`).
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <sstream>

#include "core/cli/command.hpp"
#include "core/error.hpp"

namespace mlpt::cli {

std::vector<Command>& command_registry() {
  static std::vector<Command> registry;
  return registry;
}

namespace {

std::vector<std::string> split_words(const std::string& name) {
  std::istringstream in(name);
  std::vector<std::string> words;
  for (std::string w; in >> w;) words.push_back(w);
  return words;
}

void print_help() {
  std::cout << "mlpt " << MLPT_VERSION << ": MLPerf LLM post-training (GRPO on SWE tasks)\n\nusage:\n";
  auto commands = command_registry();
  std::sort(commands.begin(), commands.end(),
            [](const Command& a, const Command& b) { return a.name < b.name; });
  for (const auto& c : commands) {
    std::string line = "  mlpt " + c.name + " " + c.usage;
    if (line.size() < 52) std::cout << line << std::string(52 - line.size(), ' ') << c.summary << "\n";
    else std::cout << line << "\n" << std::string(52, ' ') << c.summary << "\n";
  }
  std::cout << "\nOther words run the tool mlpt-WORD beside this executable, if there is one.\n";
}

// Runs `mlpt-<word>` from this executable's folder or PATH; returns only if it cannot.
int run_external(const std::string& word, int argc, char** argv) {
  std::string tool = "mlpt-" + word;
  std::error_code ec;
  auto self = std::filesystem::read_symlink("/proc/self/exe", ec);
  // argv is {mlpt, WORD, rest...}; the tool gets {mlpt-WORD, rest...}.
  std::vector<char*> args{tool.data()};
  args.insert(args.end(), argv + 2, argv + argc);
  args.push_back(nullptr);
  if (!ec) {
    auto beside = self.parent_path() / tool;
    if (std::filesystem::exists(beside)) execv(beside.c_str(), args.data());
  }
  execvp(tool.c_str(), args.data());
  std::cerr << "mlpt: unknown command '" << word << "' (no sub-command and no " << tool
            << " tool); see mlpt --help\n";
  return 2;
}

}  // namespace
}  // namespace mlpt::cli

int main(int argc, char** argv) {
  using namespace mlpt::cli;
  std::vector<std::string> args(argv + 1, argv + argc);
  if (args.empty() || args[0] == "--help" || args[0] == "-h" || args[0] == "help") {
    print_help();
    return args.empty() ? 2 : 0;
  }
  if (args[0] == "--version") {
    std::cout << "mlpt " << MLPT_VERSION << " (ABI " << MLPT_ABI_VERSION_MAJOR << "."
              << MLPT_ABI_VERSION_MINOR << ")\n";
    return 0;
  }
  const Command* best = nullptr;
  size_t best_words = 0;
  for (const auto& c : command_registry()) {
    auto words = split_words(c.name);
    if (words.size() > args.size() || words.size() <= best_words) continue;
    if (std::equal(words.begin(), words.end(), args.begin())) best = &c, best_words = words.size();
  }
  if (!best) return run_external(args[0], argc, argv);
  std::vector<std::string> rest(args.begin() + static_cast<long>(best_words), args.end());
  if (!rest.empty() && (rest[0] == "--help" || rest[0] == "-h")) {
    std::cout << "usage: mlpt " << best->name << " " << best->usage << "\n" << best->summary << "\n";
    return 0;
  }
  try {
    return best->run(rest);
  } catch (const mlpt::Error& e) {
    std::cerr << "mlpt " << best->name << ": " << e.what() << "\n";
    return 2;
  } catch (const std::exception& e) {
    std::cerr << "mlpt " << best->name << ": internal error: " << e.what() << "\n";
    return 3;
  }
}
