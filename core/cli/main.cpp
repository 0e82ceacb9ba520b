// `mlpt`: dispatches to the registered sub-command whose name is the longest prefix of the
// arguments. A first word no command has is looked up as an external tool `mlpt-WORD` beside this
// executable (as git does), which is how a plugin ships its own commands (e.g. `mlpt model`).
// `--help`/`-h` anywhere after a command, and `mlpt help CMD`, print that command's help; a group
// word alone (`mlpt check`) lists its sub-commands.
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <iostream>
#include <optional>
#include <sstream>

#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>

#include "core/cli/command.hpp"
#include "core/cli/help.hpp"
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

// The command whose name is the longest prefix of `args`, and how many words it took.
std::pair<const Command*, size_t> find_command(const std::vector<std::string>& args) {
  const Command* best = nullptr;
  size_t best_words = 0;
  for (const auto& c : command_registry()) {
    auto words = split_words(c.name);
    if (words.size() > args.size() || words.size() <= best_words) continue;
    if (std::equal(words.begin(), words.end(), args.begin())) best = &c, best_words = words.size();
  }
  return {best, best_words};
}

bool is_help(const std::string& a) { return a == "--help" || a == "-h"; }

// Runs `mlpt-<word>` from this executable's folder or PATH with `rest`; returns only if it cannot.
int run_external(const std::string& word, const std::vector<std::string>& rest) {
  std::string tool = "mlpt-" + word;
  std::vector<std::string> storage{tool};
  storage.insert(storage.end(), rest.begin(), rest.end());
  std::vector<char*> args;
  for (auto& a : storage) args.push_back(a.data());
  args.push_back(nullptr);
  auto beside = executable_dir() / tool;
  if (!executable_dir().empty() && std::filesystem::exists(beside)) execv(beside.c_str(), args.data());
  execvp(tool.c_str(), args.data());
  std::cerr << "mlpt: unknown command '" << word << "' (no sub-command and no " << tool
            << " tool); see mlpt --help\n";
  return 2;
}

// `--log-level LEVEL` before the command, else MLPT_LOG_LEVEL; throws mlpt::Error on a bad level.
void set_log_level(std::optional<std::string> level) {
  if (!level)
    if (const char* env = std::getenv("MLPT_LOG_LEVEL")) level = env;
  if (!level) return;
  static const std::vector<std::pair<std::string, spdlog::level::level_enum>> levels = {
      {"debug", spdlog::level::debug}, {"info", spdlog::level::info}, {"warning", spdlog::level::warn},
      {"error", spdlog::level::err},   {"off", spdlog::level::off}};
  for (const auto& [name, value] : levels)
    if (*level == name) return spdlog::set_level(value);
  throw Error(MLPT_INVALID_ARGUMENT, "log level must be debug, info, warning, error or off, got '" + *level + "'");
}

// Help for the words after `mlpt help`: a command, a group, or a tool's own --help.
int help_on(const std::vector<std::string>& words) {
  if (words.empty()) {
    print_overview();
    return 0;
  }
  auto [command, used] = find_command(words);
  if (command && used == words.size()) {
    print_command_help(*command);
    return 0;
  }
  std::string group;
  for (const auto& w : words) group += (group.empty() ? "" : " ") + w;
  if (print_group_help(group)) return 0;
  return run_external(words[0], {"--help"});
}

}  // namespace
}  // namespace mlpt::cli

int main(int argc, char** argv) {
  using namespace mlpt::cli;
  // stdout carries only a command's result (JSON, tables, reports); every log record goes to
  // stderr, the host's and the plugins' alike (spdlog's default logger writes to stdout).
  spdlog::set_default_logger(spdlog::stderr_color_mt("mlpt"));
  std::vector<std::string> args(argv + 1, argv + argc);
  try {
    std::optional<std::string> level;
    while (!args.empty() && args[0].rfind("--log-level", 0) == 0) {
      if (args[0] == "--log-level") {
        if (args.size() < 2) throw mlpt::Error("option --log-level needs a value");
        level = args[1];
        args.erase(args.begin(), args.begin() + 2);
      } else if (args[0].rfind("--log-level=", 0) == 0) {
        level = args[0].substr(12);
        args.erase(args.begin());
      } else {
        break;
      }
    }
    set_log_level(level);
  } catch (const mlpt::Error& e) {
    std::cerr << "mlpt: " << e.what() << "\n";
    return 2;
  }
  if (args.empty() || is_help(args[0])) {
    print_overview();
    return args.empty() ? 2 : 0;
  }
  if (args[0] == "help") return help_on({args.begin() + 1, args.end()});
  if (args[0] == "--version") {
    std::cout << "mlpt " << MLPT_VERSION << " (ABI " << MLPT_ABI_VERSION_MAJOR << "."
              << MLPT_ABI_VERSION_MINOR << ")\n";
    return 0;
  }
  auto [best, best_words] = find_command(args);
  if (!best) {
    // A group word alone or with --help (`mlpt check`, `mlpt plugins -h`) lists its sub-commands.
    const bool help = args.size() == 2 && is_help(args[1]);
    if ((args.size() == 1 || help) && print_group_help(args[0])) return help ? 0 : 2;
    return run_external(args[0], {args.begin() + 1, args.end()});
  }
  std::vector<std::string> rest(args.begin() + static_cast<long>(best_words), args.end());
  if (std::any_of(rest.begin(), rest.end(), is_help)) {
    print_command_help(*best);
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
