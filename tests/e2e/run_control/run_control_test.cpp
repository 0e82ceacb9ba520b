// Interrupt and resume through the real `mlpt` command: SIGINT in the middle of a run stops it
// within seconds with exit 130, the result log closed with status aborted and the checkpoints
// kept; `mlpt run --resume DIR` continues from the last checkpoint with the same data order (step s
// trains prompts (s-1)·P … s·P-1 of the file) up to max_steps. A folder that is not a run, and a
// config changed since the run started, are refused with errors that say so.
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

#include "core/mllog/reader.hpp"
#include "core/run/checkpoint.hpp"

namespace fs = std::filesystem;
using nlohmann::json;

extern char** environ;

namespace {

constexpr int kSteps = 6, kCheckpointEvery = 2, kPrompts = 4;

std::string read_file(const fs::path& p) {
  std::ifstream in(p);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

// configs/tiny.toml with its own output folder, absolute data paths and a short schedule.
fs::path write_config(const fs::path& dir, const std::string& extra_comment = "") {
  std::string text = read_file(fs::path(MLPT_SOURCE_DIR) / "configs" / "tiny.toml");
  text = std::regex_replace(text, std::regex("output_dir = \"[^\"]*\""), "output_dir = \"" + (dir / "out").string() + "\"");
  text = std::regex_replace(text, std::regex("\"\\.\\./tasks/"), "\"" + std::string(MLPT_SOURCE_DIR) + "/tasks/");
  text = std::regex_replace(text, std::regex("max_steps = [0-9]+"), "max_steps = " + std::to_string(kSteps));
  text = std::regex_replace(text, std::regex("checkpoint_every_steps = [0-9]+"), "checkpoint_every_steps = " + std::to_string(kCheckpointEvery));
  text = std::regex_replace(text, std::regex("num_prompts_per_step = [0-9]+"), "num_prompts_per_step = " + std::to_string(kPrompts));
  fs::create_directories(dir);
  std::ofstream(dir / "run.toml") << text << extra_comment;
  return dir / "run.toml";
}

struct Process {
  pid_t pid = -1;
  fs::path output;
  // Exit code, or -1 if it did not end within `seconds` (then it is killed).
  int wait(double seconds) {
    auto until = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
    int status = 0;
    while (std::chrono::steady_clock::now() < until) {
      if (waitpid(pid, &status, WNOHANG) == pid) return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    kill(pid, SIGKILL);
    waitpid(pid, &status, 0);
    return -1;
  }
  std::string text() const { return read_file(output); }
};

Process spawn_mlpt(std::vector<std::string> args, const fs::path& output) {
  setenv("MLPT_CACHE_DIR", MLPT_CACHE_DIR, 1);
  setenv("MLPT_PLUGIN_PATH", MLPT_PLUGIN_DIR, 1);
  args.insert(args.begin(), MLPT_BIN);
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, 1, output.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  posix_spawn_file_actions_adddup2(&actions, 1, 2);
  Process p;
  p.output = output;
  REQUIRE(posix_spawn(&p.pid, MLPT_BIN, &actions, nullptr, argv.data(), environ) == 0);
  posix_spawn_file_actions_destroy(&actions);
  return p;
}

std::vector<json> metrics(const fs::path& out) {
  std::vector<json> rows;
  std::ifstream in(out / "metrics.jsonl");
  for (std::string line; std::getline(in, line);)
    if (!line.empty()) rows.push_back(json::parse(line));
  return rows;
}

// The run_stop record of a result log.
mlpt::mllog::Record run_stop(const fs::path& log) {
  auto parsed = mlpt::mllog::parse_log_file(log);
  for (auto it = parsed.records.rbegin(); it != parsed.records.rend(); ++it)
    if (it->key == "run_stop") return *it;
  FAIL("no run_stop in " << log);
  return {};
}

std::vector<int64_t> expected_prompts(int64_t step) {
  std::vector<int64_t> p;
  for (int i = 0; i < kPrompts; ++i) p.push_back((step - 1) * kPrompts + i);
  return p;
}

}  // namespace

TEST_CASE("SIGINT stops a run cleanly; --resume DIR continues from its last checkpoint in the same data order") {
  if (!fs::exists(fs::path(MLPT_CACHE_DIR) / "models/tiny/config.json")) FAIL("missing tiny model: run scripts/prepare-tiny.sh");
  const fs::path dir = fs::temp_directory_path() / ("mlpt-run-control-" + std::to_string(getpid()));
  fs::remove_all(dir);
  const fs::path config = write_config(dir), out = dir / "out";

  // Interrupt once step 3 is recorded (a checkpoint exists at step 2).
  Process first = spawn_mlpt({"run", config.string()}, dir / "first.txt");
  auto until = std::chrono::steady_clock::now() + std::chrono::seconds(300);
  while (metrics(out).size() < 3 && std::chrono::steady_clock::now() < until) std::this_thread::sleep_for(std::chrono::milliseconds(100));
  REQUIRE(metrics(out).size() >= 3);
  auto signalled = std::chrono::steady_clock::now();
  kill(first.pid, SIGINT);
  int code = first.wait(60);
  double stop_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - signalled).count();
  INFO(first.text());
  CHECK(code == 130);
  WARN("SIGINT to exit: " << stop_s << " s");
  CHECK(stop_s < 30);
  auto stop = run_stop(out / "result.txt");
  CHECK(stop.metadata.value("status", "") == "aborted");
  CHECK_THAT(first.text(), Catch::Contains("interrupted"));
  const auto interrupted = metrics(out);
  REQUIRE(interrupted.size() < kSteps);
  auto checkpoint = mlpt::run::latest_checkpoint(out / "checkpoints");
  REQUIRE(checkpoint);
  const int64_t resumed_from = checkpoint->step;
  CHECK(resumed_from % kCheckpointEvery == 0);
  CHECK(resumed_from >= 2);
  CHECK(resumed_from <= static_cast<int64_t>(interrupted.size()));

  // Resume by folder: steps resumed_from+1 … kSteps, each on the prompts of that step.
  Process second = spawn_mlpt({"run", "--resume", out.string()}, dir / "second.txt");
  code = second.wait(300);
  INFO(second.text());
  CHECK(code == 0);
  auto all = metrics(out);
  REQUIRE(all.size() == interrupted.size() + static_cast<size_t>(kSteps - resumed_from));
  for (size_t i = interrupted.size(); i < all.size(); ++i) {
    const int64_t step = resumed_from + 1 + static_cast<int64_t>(i - interrupted.size());
    CHECK(all[i]["step"].get<int64_t>() == step);
    CHECK(all[i]["samples"].get<int64_t>() == step * kPrompts * 16);
    CHECK(all[i]["prompts"].get<std::vector<int64_t>>() == expected_prompts(step));
    CHECK(all[i]["max_staleness"].get<int64_t>() <= 1);
  }
  for (size_t i = 0; i < interrupted.size(); ++i) CHECK(all[i]["prompts"].get<std::vector<int64_t>>() == expected_prompts(i + 1));
  CHECK(fs::exists(out / "result_resumed.txt"));
  CHECK(run_stop(out / "result_resumed.txt").metadata.value("samples_count", int64_t(0)) == kSteps * kPrompts * 16);
  CHECK(mlpt::run::latest_checkpoint(out / "checkpoints")->step == kSteps);

  // A folder that is not a run, and a config changed since the run started.
  Process not_a_run = spawn_mlpt({"run", "--resume", dir.string()}, dir / "third.txt");
  CHECK(not_a_run.wait(30) != 0);
  CHECK_THAT(not_a_run.text(), Catch::Contains("run.json"));
  write_config(dir, "# edited\n");
  Process changed = spawn_mlpt({"run", "--resume", out.string()}, dir / "fourth.txt");
  CHECK(changed.wait(30) != 0);
  CHECK_THAT(changed.text(), Catch::Contains("changed since the run"));
  fs::remove_all(dir);
}
