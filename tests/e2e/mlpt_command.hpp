// What the e2e tests share to drive the real `mlpt` command: the tiny learning config rewritten
// for a test folder, a spawned `mlpt` with its output captured, and readers for what a run writes.
// Tests that include it define MLPT_BIN, MLPT_SOURCE_DIR, MLPT_CACHE_DIR and MLPT_PLUGIN_DIR.
#pragma once

#include <catch2/catch.hpp>

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>
#include <thread>

#include <nlohmann/json.hpp>

#include "core/mllog/reader.hpp"

extern char** environ;

namespace mlpt::e2e {

namespace fs = std::filesystem;

inline std::string read_text(const fs::path& p) {
  std::ifstream in(p);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

struct TinySchedule {
  int steps = 6, checkpoint_every = 2, prompts = 4;
};

// configs/tiny.toml with output_dir `dir`/out, absolute data paths, the given schedule, and each
// `replacements` (regex, text) applied; written to `dir`/run.toml with `extra` appended.
inline fs::path write_tiny_config(const fs::path& dir, TinySchedule s, const std::string& extra = "",
                                  const std::vector<std::pair<std::string, std::string>>& replacements = {}) {
  std::string text = read_text(fs::path(MLPT_SOURCE_DIR) / "configs" / "tiny.toml");
  text = std::regex_replace(text, std::regex("output_dir = \"[^\"]*\""), "output_dir = \"" + (dir / "out").string() + "\"");
  text = std::regex_replace(text, std::regex("\"\\.\\./tasks/"), "\"" + std::string(MLPT_SOURCE_DIR) + "/tasks/");
  text = std::regex_replace(text, std::regex("max_steps = [0-9]+"), "max_steps = " + std::to_string(s.steps));
  text = std::regex_replace(text, std::regex("checkpoint_every_steps = [0-9]+"), "checkpoint_every_steps = " + std::to_string(s.checkpoint_every));
  text = std::regex_replace(text, std::regex("num_prompts_per_step = [0-9]+"), "num_prompts_per_step = " + std::to_string(s.prompts));
  for (const auto& [pattern, with] : replacements) text = std::regex_replace(text, std::regex(pattern), with);
  fs::create_directories(dir);
  std::ofstream(dir / "run.toml") << text << extra;
  return dir / "run.toml";
}

struct Process {
  pid_t pid = -1;
  fs::path output;
  bool signalled = false;
  int signal = 0;
  // Exit code (128 + N for a signal), or -1 if it did not end within `seconds` (then it is killed).
  int wait(double seconds) {
    auto until = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
    int status = 0;
    while (std::chrono::steady_clock::now() < until) {
      if (waitpid(pid, &status, WNOHANG) == pid) {
        signalled = WIFSIGNALED(status);
        signal = signalled ? WTERMSIG(status) : 0;
        return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    kill(pid, SIGKILL);
    waitpid(pid, &status, 0);
    return -1;
  }
  std::string text() const { return read_text(output); }
};

// `mlpt ARGS...` with stdout and stderr in `output`; `env` entries (NAME=VALUE) are added.
inline Process spawn_mlpt(std::vector<std::string> args, const fs::path& output, const std::vector<std::string>& env = {}) {
  setenv("MLPT_CACHE_DIR", MLPT_CACHE_DIR, 1);
  setenv("MLPT_PLUGIN_PATH", MLPT_PLUGIN_DIR, 1);
  args.insert(args.begin(), MLPT_BIN);
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  std::vector<std::string> env_text(env);
  for (char** e = environ; *e; ++e) env_text.emplace_back(*e);
  std::vector<char*> envp;
  for (auto& e : env_text) envp.push_back(e.data());
  envp.push_back(nullptr);
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, 1, output.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  posix_spawn_file_actions_adddup2(&actions, 1, 2);
  Process p;
  p.output = output;
  REQUIRE(posix_spawn(&p.pid, MLPT_BIN, &actions, nullptr, argv.data(), envp.data()) == 0);
  posix_spawn_file_actions_destroy(&actions);
  return p;
}

// The rows of a run's metrics.jsonl.
inline std::vector<nlohmann::json> metrics(const fs::path& out, const std::string& name = "metrics.jsonl") {
  std::vector<nlohmann::json> rows;
  std::ifstream in(out / name);
  for (std::string line; std::getline(in, line);)
    if (!line.empty()) rows.push_back(nlohmann::json::parse(line));
  return rows;
}

// The last record with `key` of a result log.
inline mlpt::mllog::Record last_record(const fs::path& log, const std::string& key) {
  auto parsed = mlpt::mllog::parse_log_file(log);
  for (auto it = parsed.records.rbegin(); it != parsed.records.rend(); ++it)
    if (it->key == key) return *it;
  FAIL("no " << key << " in " << log);
  return {};
}

}  // namespace mlpt::e2e
