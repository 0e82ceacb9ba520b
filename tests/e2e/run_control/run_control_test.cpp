// Interrupt and resume through the real `mlpt` command: SIGINT in the middle of a run stops it
// within seconds with exit 130, the result log closed with status aborted and the checkpoints
// kept; `mlpt run --resume DIR` continues from the last checkpoint with the same data order (step s
// trains prompts (s-1)·P … s·P-1 of the file) up to max_steps. A folder that is not a run, and a
// config whose seed changed since the run started, are refused with errors that say so. A second interrupt
// during the first one's stop quits at once (exit 130, the result log left open).
#include <algorithm>

#include "../mlpt_command.hpp"
#include "core/run/checkpoint.hpp"

namespace fs = std::filesystem;
using nlohmann::json;
using namespace mlpt::e2e;

namespace {

constexpr int kSteps = 6, kCheckpointEvery = 2, kPrompts = 4;

// Each episode step takes 50 ms: a step's 64 rollouts on 16 slots then take 0.2 s or more however
// fast the machine, so a run is still going when a test's signal lands.
fs::path write_config(const fs::path& dir, const std::vector<std::pair<std::string, std::string>>& replacements = {}) {
  return write_tiny_config(dir, {kSteps, kCheckpointEvery, kPrompts},
                           "\n[components.harness.settings]\nstep_delay_ms = 50\n", replacements);
}

mlpt::mllog::Record run_stop(const fs::path& log) { return last_record(log, "run_stop"); }

std::vector<int64_t> expected_prompts(int64_t step) {
  std::vector<int64_t> p;
  for (int i = 0; i < kPrompts; ++i) p.push_back((step - 1) * kPrompts + i);
  return p;
}

}  // namespace

TEST_CASE("SIGINT stops a run cleanly, then --resume DIR continues from its last checkpoint in the same data order") {
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
  CHECK_THAT(first.text(), Catch::Contains("mlpt: interrupted; stopping"));  // acknowledged on the terminal at once
  // The metric sink is installed: what the reference engine reports through host services `metric`
  // is in every step's metrics row and in the report.
  for (const auto& row : metrics(out)) {
    INFO(row.dump());
    REQUIRE(row.contains("plugins"));
    CHECK(row["plugins"].value("engine/load_weights_s", -1.0) >= 0.0);
  }
  CHECK_THAT(read_text(out / "report.html"), Catch::Contains("Plugin metrics") && Catch::Contains("engine/load_weights_s"));
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
  CHECK(code == 1);  // ran to max_steps without reaching the target
  auto all = metrics(out);
  // Every step once: the checkpoint's steps, then the resumed ones; the interrupted attempt's rows
  // (some past the checkpoint, redone) are kept aside, not appended.
  REQUIRE(all.size() == static_cast<size_t>(kSteps));
  CHECK(metrics(out, "metrics_attempt_1.jsonl").size() == interrupted.size());
  for (size_t i = static_cast<size_t>(resumed_from); i < all.size(); ++i) {
    const int64_t step = static_cast<int64_t>(i) + 1;
    CHECK(all[i]["step"].get<int64_t>() == step);
    CHECK(all[i]["samples"].get<int64_t>() == step * kPrompts * 16);
    CHECK(all[i]["prompts"].get<std::vector<int64_t>>() == expected_prompts(step));
    CHECK(all[i]["max_staleness"].get<int64_t>() <= 1);
  }
  for (size_t i = 0; i < static_cast<size_t>(resumed_from); ++i) {
    CHECK(all[i]["step"].get<int64_t>() == static_cast<int64_t>(i) + 1);
    CHECK(all[i]["prompts"] == interrupted[i]["prompts"]);
  }
  CHECK(fs::exists(out / "result_resumed.txt"));
  CHECK(run_stop(out / "result_resumed.txt").metadata.value("samples_count", int64_t(0)) == kSteps * kPrompts * 16);
  CHECK(mlpt::run::latest_checkpoint(out / "checkpoints")->step == kSteps);

  // A folder that is not a run, and a config changed since the run started.
  Process not_a_run = spawn_mlpt({"run", "--resume", dir.string()}, dir / "third.txt");
  CHECK(not_a_run.wait(30) != 0);
  CHECK_THAT(not_a_run.text(), Catch::Contains("run.json"));
  write_config(dir, {{"seed = [0-9]+", "seed = 8"}});
  Process changed = spawn_mlpt({"run", "--resume", out.string()}, dir / "fourth.txt");
  CHECK(changed.wait(30) != 0);
  CHECK_THAT(changed.text(), Catch::Contains("changed since the run") && Catch::Contains("[run] seed was 7, now 8"));
  fs::remove_all(dir);
}

TEST_CASE("a second interrupt while the first is being handled quits at once with exit 130") {
  if (!fs::exists(fs::path(MLPT_CACHE_DIR) / "models/tiny/config.json")) FAIL("missing tiny model: run scripts/prepare-tiny.sh");
  const fs::path dir = fs::temp_directory_path() / ("mlpt-run-control-twice-" + std::to_string(getpid()));
  fs::remove_all(dir);
  const fs::path config = write_config(dir), out = dir / "out";
  Process run = spawn_mlpt({"run", config.string()}, dir / "run.txt");
  auto until = std::chrono::steady_clock::now() + std::chrono::seconds(300);
  while (metrics(out).empty() && std::chrono::steady_clock::now() < until) std::this_thread::sleep_for(std::chrono::milliseconds(50));
  REQUIRE(!metrics(out).empty());
  // Both signals pending while the process is stopped, so the second is delivered right after the
  // first, before the clean stop could finish (Ctrl-C then SIGTERM, as a user and a scheduler would).
  kill(run.pid, SIGSTOP);
  kill(run.pid, SIGINT);
  kill(run.pid, SIGTERM);
  kill(run.pid, SIGCONT);
  const int code = run.wait(30);
  INFO(run.text());
  CHECK(code == 130);
  CHECK_THAT(run.text(), Catch::Contains("mlpt: interrupted; stopping") && Catch::Contains("second interrupt; quitting now"));
  // Quit at once: no clean stop, so the result log has no run_stop.
  const auto log = mlpt::mllog::parse_log_file(out / "result.txt");
  CHECK(std::none_of(log.records.begin(), log.records.end(), [](const auto& r) { return r.key == "run_stop"; }));
  fs::remove_all(dir);
}
