// Results that can be trusted, through the real `mlpt` command on the tiny learning config with a
// reward plugin that really segfaults (faulty_reward_plugin.cpp):
// - the crash leaves the result log closed (run_stop aborted), a message naming the component and
//   the call, and the last checkpoint whole (it resumes);
// - a folder holding a run is refused, untouched, by a new run; --new-folder takes the next one;
// - --resume CONFIG.toml checks the config as --resume DIR does;
// - the resumed run is marked (init_checkpoint_step, time_already_spent_ms), counts the earlier
//   time, keeps every step once in metrics.jsonl, and `check log` / `check summary` say it is not
//   a scored result;
// - exit codes: 1 not converged, 2 refused before running, 3 failed, 128+11 crashed.
#include "../folder_snapshot.hpp"
#include "../mlpt_command.hpp"
#include "core/run/checkpoint.hpp"
#include "core/run/rollout_record.hpp"

namespace fs = std::filesystem;
using nlohmann::json;
using namespace mlpt::e2e;

namespace {

constexpr int kSteps = 6, kCheckpointEvery = 2, kPrompts = 4, kGenerations = 16;

// The tiny config with the faulty reward in place of the letters one.
fs::path faulty_config(const fs::path& dir, const std::string& extra = "") {
  return write_tiny_config(dir, {kSteps, kCheckpointEvery, kPrompts}, extra,
                           {{"\\[components\\.reward\\]\nplugin = \"[^\"]*\"",
                             "[components.reward]\nplugin = \"" + std::string(MLPT_FAULTY_REWARD) + "\"\nname = \"faulty\""}});
}

std::string fault_env(const std::string& what) { return "MLPT_TEST_REWARD_FAULT=" + what; }

int mlpt_exit(const std::vector<std::string>& args, const fs::path& output, double seconds = 60) {
  return spawn_mlpt(args, output).wait(seconds);
}

}  // namespace

TEST_CASE("a segfaulting plugin leaves a closed log and a whole checkpoint, then the resumed run is marked and counted") {
  if (!fs::exists(fs::path(MLPT_CACHE_DIR) / "models/tiny/config.json")) FAIL("missing tiny model: run scripts/prepare-tiny.sh");
  const fs::path dir = fs::temp_directory_path() / ("mlpt-run-integrity-" + std::to_string(getpid()));
  fs::remove_all(dir);
  const fs::path config = faulty_config(dir), out = dir / "out";

  // The reward segfaults on the first grade of step 5's prompts: steps 1-3 are trained by then
  // (staleness 1), so the step-2 checkpoint is complete.
  Process crashed = spawn_mlpt({"run", config.string()}, dir / "crash.txt", {fault_env("segv:" + std::to_string(4 * kPrompts * kGenerations + 1))});
  const int code = crashed.wait(400);
  const std::string text = crashed.text();
  INFO(text);
  CHECK(crashed.signalled);
  CHECK(crashed.signal == SIGSEGV);
  CHECK(code == 128 + SIGSEGV);
  CHECK_THAT(text, Catch::Contains("crashed on signal 11") && Catch::Contains("in reward \"faulty\"") &&
                       Catch::Contains("during its grade call") && Catch::Contains("run_stop status aborted"));
  const auto stop = last_record(out / "result.txt", "run_stop");
  CHECK(stop.metadata.value("status", "") == "aborted");
  const auto parsed = mlpt::mllog::parse_log_file(out / "result.txt");
  CHECK(parsed.errors.empty());
  CHECK(parsed.records.back().key == "run_stop");  // the log is closed: nothing after run_stop
  auto checkpoint = mlpt::run::latest_checkpoint(out / "checkpoints");
  REQUIRE(checkpoint);
  CHECK(checkpoint->step >= 2);
  CHECK(checkpoint->step % kCheckpointEvery == 0);
  CHECK(static_cast<int64_t>(checkpoint->steps.size()) == checkpoint->step);
  CHECK_THAT(text, Catch::Contains("last whole checkpoint: step " + std::to_string(checkpoint->step)));
  const auto crashed_metrics = metrics(out);

  // A new run into the same folder is refused before it writes anything.
  const auto before = folder_snapshot(out);
  CHECK(mlpt_exit({"run", config.string()}, dir / "again.txt") == 2);
  CHECK_THAT(read_text(dir / "again.txt"), Catch::Contains("holds another run") && Catch::Contains("--resume") &&
                                               Catch::Contains("--new-folder"));
  CHECK(folder_snapshot(out) == before);

  // --resume CONFIG.toml with another config is refused like --resume DIR would be.
  const fs::path other = dir / "other";
  fs::create_directories(other);
  std::string edited = read_text(config);
  edited.replace(edited.find("seed = 7"), 8, "seed = 8");
  std::ofstream(other / "run.toml") << edited;
  CHECK(mlpt_exit({"run", "--resume", (other / "run.toml").string()}, dir / "other.txt") == 2);
  CHECK_THAT(read_text(dir / "other.txt"), Catch::Contains("not the config the run in") && Catch::Contains("[run] seed was 7, now 8"));
  CHECK(folder_snapshot(out) == before);

  // Resume by config, without the fault: it runs to max_steps (not converged: exit 1).
  Process resumed = spawn_mlpt({"run", "--resume", config.string()}, dir / "resume.txt");
  const int resumed_code = resumed.wait(400);
  INFO(resumed.text());
  CHECK(resumed_code == 1);
  CHECK_THAT(resumed.text(), Catch::Contains("resumed from the step-" + std::to_string(checkpoint->step) + " checkpoint"));
  const fs::path log = out / "result_resumed.txt";
  REQUIRE(fs::exists(log));
  CHECK(last_record(log, "init_checkpoint_step").value == checkpoint->step);
  const auto spent = last_record(log, "time_already_spent_ms").value.get<int64_t>();
  const auto first = mlpt::mllog::parse_log_file(out / "result.txt");
  const int64_t first_ms = first.records.back().time_ms - last_record(out / "result.txt", "run_start").time_ms;
  CHECK(spent == first_ms);
  CHECK(spent > 0);
  // Every step once, in order; the crashed attempt's rows are kept aside.
  const auto rows = metrics(out);
  REQUIRE(rows.size() == static_cast<size_t>(kSteps));
  for (size_t i = 0; i < rows.size(); ++i) CHECK(rows[i]["step"].get<int64_t>() == static_cast<int64_t>(i) + 1);
  CHECK(metrics(out, "metrics_attempt_1.jsonl").size() == crashed_metrics.size());

  // The checkers say what a resumed run means.
  CHECK(mlpt_exit({"check", "log", log.string()}, dir / "check_log.txt") == 1);
  CHECK_THAT(read_text(dir / "check_log.txt"), Catch::Contains("resumes a run from its step-" + std::to_string(checkpoint->step)) &&
                                                   Catch::Contains("resumed run"));
  CHECK(mlpt_exit({"check", "log", log.string(), "--json"}, dir / "check_log.json") == 1);
  const json j = json::parse(read_text(dir / "check_log.json"));
  CHECK(j["run"]["resumed_from_step"] == checkpoint->step);
  CHECK(j["run"]["time_already_spent_minutes"].get<double>() == Approx(static_cast<double>(spent) / 60000.0));
  CHECK(mlpt_exit({"check", "summary", log.string(), (out / "result.txt").string(), log.string()}, dir / "summary.txt") == 1);
  CHECK_THAT(read_text(dir / "summary.txt"), Catch::Contains("resumed run cannot be scored"));

  // Every rollout is recorded; one shows as a transcript, and the report links the worst and best.
  const auto records = mlpt::run::read_rollouts(out);
  const size_t training = static_cast<size_t>(std::count_if(records.begin(), records.end(), [](const json& r) { return r["kind"] == "train"; }));
  CHECK(training >= static_cast<size_t>((kSteps - checkpoint->step) * kPrompts * kGenerations));
  for (size_t i = 0; i < records.size(); ++i) CHECK(records[i]["id"] == static_cast<int64_t>(i));
  const json& r = records.back();
  CHECK(r["task"].get<std::string>().rfind("letters__", 0) == 0);
  CHECK(r["turns"].size() == 1);
  CHECK(r["turns"][0]["reply"].contains("content"));
  CHECK(r["turns"][0]["generated_tokens"].get<int64_t>() > 0);
  CHECK(r["tokens"]["generated"].get<int64_t>() == r["turns"][0]["generated_tokens"].get<int64_t>());
  CHECK(r["reward"]["reason"].is_string());
  CHECK(r["timings"]["generation_s"].get<double>() > 0);
  CHECK(r["weight_version"]["max"].get<int64_t>() >= r["weight_version"]["min"].get<int64_t>());
  CHECK(mlpt_exit({"rollout", "show", out.string(), "--worst"}, dir / "worst.txt") == 0);
  const std::string worst = read_text(dir / "worst.txt");
  CHECK_THAT(worst, Catch::Contains("reward 0 (not accepted)") && Catch::Contains("[user]") && Catch::Contains("[assistant]") &&
                        Catch::Contains("--- turn 1"));
  CHECK(mlpt_exit({"rollout", "show", out.string(), "--id", "3", "--json"}, dir / "three.json") == 0);
  CHECK(json::parse(read_text(dir / "three.json"))["id"] == 3);
  CHECK(mlpt_exit({"rollout", "show", out.string(), "--id", "999999"}, dir / "missing.txt") == 2);
  CHECK_THAT(read_text(dir / "missing.txt"), Catch::Contains("no rollout with id 999999"));
  const std::string report = read_text(out / "report.html");
  CHECK_THAT(report, Catch::Contains("worst training rollout") && Catch::Contains("best training rollout") &&
                         Catch::Contains("href='#rollout-"));

  // --new-folder takes out-2 and leaves out alone; a failing reward ends the run with exit 3.
  const auto after_resume = folder_snapshot(out);
  Process fresh = spawn_mlpt({"run", config.string(), "--new-folder"}, dir / "fresh.txt", {fault_env("error:1")});
  CHECK(fresh.wait(300) == 3);
  INFO(fresh.text());
  CHECK_THAT(fresh.text(), Catch::Contains("failing on purpose"));
  CHECK(fs::exists(dir / "out-2" / "run.json"));
  CHECK(last_record(dir / "out-2" / "result.txt", "run_stop").metadata.value("status", "") == "aborted");
  CHECK(folder_snapshot(out) == after_resume);
  fs::remove_all(dir);
}
